//! The storage behaviour suite: what every [`LogStore`] and [`OffsetStore`] backend must
//! do, written once against the traits so the embedded store and the Iggy bridge are held
//! to the same tests.
//!
//! Each check is a `pub async fn(&Harness) -> CheckResult`; a failure names what was
//! expected and what came back. Checks create their topics and groups under the harness
//! prefix, so they may share one backend (a real Iggy server) as long as each gets a
//! distinct prefix. [`store_suite!`](crate::store_suite) turns every check into a
//! separate `#[tokio::test]`:
//!
//! ```ignore
//! async fn harness(test: &'static str) -> kafka_store::suite::Harness {
//!     let store = std::sync::Arc::new(MyStore::connect().await);
//!     kafka_store::suite::Harness::new(store, format!("{test}-{}", run_id()))
//! }
//! kafka_store::store_suite!(harness);
//! ```
//!
//! Some checks need a [`Capability`] that not every backend has: retention applied as of
//! a chosen clock ([`RetentionDriver`]), retention the backend applies by itself in real
//! time ([`ExpiryDriver`], for which a `RetentionDriver` can stand in), a
//! [`LogStore::watch`] that notifies, and for a backend whose notifications miss other
//! writers' appends, a second handle to write through. Without it a check ends with
//! [`CheckError::Skipped`], which the generated test prints as
//! `SKIPPED: <check>: <why>`; a harness that declares the capability expected
//! ([`Harness::expecting`]) turns that skip into a failure.

use crate::memory::MemoryStore;
use crate::{
    CommittedOffset, LogStore, NewTopic, OffsetStore, PendingOffsets, StoreError, StoreResult,
    TopicConfig, ValidBatch,
};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use kafka_records::{
    BatchHeader, BatchOptions, Compression, DecodeLimits, Header, NewRecord, RecordBatch,
    TimestampType, encode_batch,
};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;

/// What a check needs beyond the [`LogStore`] and [`OffsetStore`] traits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Retention applied on demand as of a chosen clock: [`Harness::retention`].
    RetentionOnDemand,
    /// Retention the backend applies by itself, by its own clock: [`Harness::expiry`],
    /// or a [`RetentionDriver`] standing in for it.
    RetentionInRealTime,
    /// [`LogStore::watch`] returns a receiver for a partition the store has looked up.
    Watch,
    /// Another handle on the same data ([`Harness::other_writer`]), needed when the
    /// backend's notifications miss appends made elsewhere.
    OtherWriter,
    /// Compaction of `cleanup.policy=compact` topics on demand, as of a chosen clock:
    /// [`Harness::compaction`].
    CompactionOnDemand,
}

impl Capability {
    /// Every capability, for a harness that must run every check.
    pub const ALL: &'static [Capability] = &[
        Capability::RetentionOnDemand,
        Capability::RetentionInRealTime,
        Capability::Watch,
        Capability::OtherWriter,
        Capability::CompactionOnDemand,
    ];
}

/// Why a check did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// The backend did something other than what the check expects.
    Failed(String),
    /// The check could not run: the harness lacks what it needs.
    Skipped(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Failed(e) => write!(f, "{e}"),
            CheckError::Skipped(why) => write!(f, "skipped: {why}"),
        }
    }
}

impl From<String> for CheckError {
    fn from(e: String) -> Self {
        CheckError::Failed(e)
    }
}

impl From<&str> for CheckError {
    fn from(e: &str) -> Self {
        CheckError::Failed(e.to_owned())
    }
}

/// The outcome of one check.
pub type CheckResult = Result<(), CheckError>;

/// Reports a check's outcome the way [`store_suite!`](crate::store_suite) does: nothing
/// when it passed, a `SKIPPED: <check>: <why>` line on stderr when it was skipped, and a
/// panic when it failed.
pub fn report(check: &str, outcome: CheckResult) {
    match outcome {
        Ok(()) => {}
        Err(CheckError::Skipped(why)) => {
            // Straight to the process's stderr: visible even when the harness captures.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {check}: {why}");
        }
        Err(CheckError::Failed(e)) => panic!("store suite check {check} failed: {e}"),
    }
}

/// How a backend applies retention on demand, as of a given clock.
#[async_trait]
pub trait RetentionDriver: Send + Sync {
    /// Applies `retention.ms` and `retention.bytes` to every partition as of `now_ms`.
    async fn apply_retention(&self, now_ms: i64);
}

#[async_trait]
impl RetentionDriver for MemoryStore {
    async fn apply_retention(&self, now_ms: i64) {
        MemoryStore::apply_retention(self, now_ms);
    }
}

/// How a backend compacts on demand, as of a given clock.
#[async_trait]
pub trait CompactionDriver: Send + Sync {
    /// Compacts every partition of every compacted topic that is due as of `now_ms`
    /// (`min.cleanable.dirty.ratio`, `max.compaction.lag.ms`), applying
    /// `min.compaction.lag.ms` and `delete.retention.ms` on the same clock.
    async fn apply_compaction(&self, now_ms: i64);
}

#[async_trait]
impl CompactionDriver for MemoryStore {
    async fn apply_compaction(&self, now_ms: i64) {
        MemoryStore::apply_compaction(self, now_ms);
    }
}

/// A backend that drops expired records by itself, in real time (Iggy's message expiry).
#[async_trait]
pub trait ExpiryDriver: Send + Sync {
    /// Creates a one-partition topic `name` with `config`, in a form the backend's own
    /// retention can act on within a test (for Iggy: segments small enough to fill).
    async fn create_topic(&self, name: &str, config: TopicConfig) -> Result<(), String>;

    /// Bytes of records to append before the first of them can be dropped (a backend
    /// that drops whole segments only drops full ones).
    fn fill_bytes(&self) -> usize;

    /// The longest the backend may take, after records expired, to drop them.
    fn grace(&self) -> Duration;
}

/// A backend under test and the name prefix its checks create things under.
#[derive(Clone)]
pub struct Harness {
    /// The log backend.
    pub log: Arc<dyn LogStore>,
    /// The offset backend.
    pub offsets: Arc<dyn OffsetStore>,
    /// Applies retention on demand; `None` skips the checks that need it.
    pub retention: Option<Arc<dyn RetentionDriver>>,
    /// Creates topics the backend expires by itself; `None` lets
    /// [`retention_in_real_time`] use `retention` instead, or skip.
    pub expiry: Option<Arc<dyn ExpiryDriver>>,
    /// A second handle on the data behind `log`, as another gateway or a native
    /// producer would write; `None` lets [`long_poll_sees_other_writers`] write through
    /// `log` when the backend notifies every append, or skip.
    pub other_writer: Option<Arc<dyn LogStore>>,
    /// Compacts on demand; `None` skips [`compaction_latest_per_key`].
    pub compaction: Option<Arc<dyn CompactionDriver>>,
    /// Capabilities this backend must have: a check that would be skipped for lack of
    /// one of them fails instead.
    pub expected: Vec<Capability>,
    /// Prefix of every topic and group name the checks create.
    pub prefix: String,
}

impl Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("log", &self.log.name())
            .field("retention", &self.retention.is_some())
            .field("expiry", &self.expiry.is_some())
            .field("compaction", &self.compaction.is_some())
            .field(
                "other_writer",
                &self.other_writer.as_ref().map(|w| w.name()),
            )
            .field("expected", &self.expected)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Harness {
    /// A harness over one store serving both traits, without drivers or other writers.
    pub fn new<S: LogStore + OffsetStore>(store: Arc<S>, prefix: impl Into<String>) -> Self {
        Self::from_parts(store.clone(), store, prefix)
    }

    /// A harness over separate log and offset backends.
    pub fn from_parts(
        log: Arc<dyn LogStore>,
        offsets: Arc<dyn OffsetStore>,
        prefix: impl Into<String>,
    ) -> Self {
        Self {
            log,
            offsets,
            retention: None,
            expiry: None,
            other_writer: None,
            compaction: None,
            expected: Vec::new(),
            prefix: prefix.into(),
        }
    }

    /// Enables the checks of retention as of a chosen clock.
    pub fn with_retention(mut self, driver: Arc<dyn RetentionDriver>) -> Self {
        self.retention = Some(driver);
        self
    }

    /// Enables the check of retention the backend applies by itself.
    pub fn with_expiry(mut self, driver: Arc<dyn ExpiryDriver>) -> Self {
        self.expiry = Some(driver);
        self
    }

    /// Enables the check of compaction as of a chosen clock.
    pub fn with_compaction(mut self, driver: Arc<dyn CompactionDriver>) -> Self {
        self.compaction = Some(driver);
        self
    }

    /// Gives the checks a second handle on the same data to write through.
    pub fn with_other_writer(mut self, writer: Arc<dyn LogStore>) -> Self {
        self.other_writer = Some(writer);
        self
    }

    /// Declares capabilities the backend must have: the checks that need them fail
    /// instead of skipping.
    pub fn expecting(mut self, capabilities: &[Capability]) -> Self {
        self.expected.extend_from_slice(capabilities);
        self
    }

    /// Whether the harness declared `capability` expected.
    pub fn expects(&self, capability: Capability) -> bool {
        self.expected.contains(&capability)
    }

    /// A topic or group name under the prefix. Only `[a-zA-Z0-9._-]`, as Kafka allows.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    /// The outcome of a check that cannot run without `capability`: skipped, or failed
    /// when the harness expects the capability.
    fn lacks(&self, capability: Capability, why: &str) -> CheckError {
        if self.expects(capability) {
            CheckError::Failed(format!(
                "{why}, but the harness expects {capability:?} of this backend"
            ))
        } else {
            CheckError::Skipped(format!("{why} ({capability:?})"))
        }
    }

    async fn create(
        &self,
        suffix: &str,
        partitions: i32,
        config: TopicConfig,
    ) -> Result<String, String> {
        let name = self.name(suffix);
        self.log
            .create_topic(
                NewTopic {
                    name: name.clone(),
                    partitions,
                    config,
                },
                false,
            )
            .await
            .ctx(&format!("create topic {name}"))?;
        Ok(name)
    }
}

/// Runs every check in turn against one harness, stopping at the first failure.
/// Returns the checks that were skipped, each with its reason.
pub async fn run_all(h: &Harness) -> Result<Vec<String>, String> {
    let mut skipped = Vec::new();
    macro_rules! run {
        ($($check:ident,)*) => {
            $(
                match $check(h).await {
                    Ok(()) => {}
                    Err(CheckError::Skipped(why)) => {
                        skipped.push(format!("{}: {why}", stringify!($check)));
                    }
                    Err(CheckError::Failed(e)) => {
                        return Err(format!("{}: {e}", stringify!($check)));
                    }
                }
            )*
        };
    }
    run!(
        topic_lifecycle,
        topic_admin,
        topic_overrides_read_back,
        append_assigns_consecutive_offsets,
        read_back_byte_exact,
        read_back_valid_from_any_encoding,
        prepared_appends_read_back,
        stamped_leader_epoch_is_stored,
        watermarks_and_read_bounds,
        read_honours_max_bytes,
        message_too_large,
        timestamps,
        topic_codec_round_trip,
        log_append_time_round_trip,
        delete_records,
        retention_by_time,
        retention_by_size,
        retention_in_real_time,
        compaction_latest_per_key,
        concurrent_producers,
        submitted_appends_keep_their_order,
        long_poll_wakeup,
        long_poll_sees_other_writers,
        offsets_commit_and_fetch,
        offsets_delete_and_groups,
        group_states_by_shard,
        transactional_flag_is_sticky,
        txn_states_by_shard,
        txn_epochs_increase,
        pending_offsets_commit_or_abort,
        pending_offsets_complete_atomically,
    );
    Ok(skipped)
}

/// Instantiates every suite check as a separate `#[tokio::test]` (multi-threaded).
///
/// `$make` is an `async fn(&'static str) -> Harness`, called with the check's name for
/// each test; it should build a fresh backend or at least a prefix no other test uses.
/// With `store_suite!(optional make)`, `make` returns `Option<Harness>` and `None` skips
/// (`make` prints why). A check that lacks a capability prints
/// `SKIPPED: <check>: <why>` and passes, unless the harness expects the capability.
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
macro_rules! store_suite {
    ($make:path) => {
        $crate::store_suite!(@list required $make);
    };
    // `$make` returns `Option<Harness>`: `None` skips the check (a backend that is not
    // available here, such as a server binary that was not given).
    (optional $make:path) => {
        $crate::store_suite!(@list optional $make);
    };
    (@list $mode:ident $make:path) => {
        $crate::store_suite!(@checks $mode $make;
            topic_lifecycle,
            topic_admin,
            topic_overrides_read_back,
            append_assigns_consecutive_offsets,
            read_back_byte_exact,
            read_back_valid_from_any_encoding,
            prepared_appends_read_back,
            stamped_leader_epoch_is_stored,
            watermarks_and_read_bounds,
            read_honours_max_bytes,
            message_too_large,
            timestamps,
            topic_codec_round_trip,
            log_append_time_round_trip,
            delete_records,
            retention_by_time,
            retention_by_size,
            retention_in_real_time,
            compaction_latest_per_key,
            concurrent_producers,
            submitted_appends_keep_their_order,
            long_poll_wakeup,
            long_poll_sees_other_writers,
            offsets_commit_and_fetch,
            offsets_delete_and_groups,
            group_states_by_shard,
            transactional_flag_is_sticky,
            txn_states_by_shard,
            txn_epochs_increase,
            pending_offsets_commit_or_abort,
            pending_offsets_complete_atomically,
        );
    };
    (@harness required $make:path, $check:ident) => {
        $make(stringify!($check)).await
    };
    (@harness optional $make:path, $check:ident) => {
        match $make(stringify!($check)).await {
            Some(h) => h,
            None => return,
        }
    };
    (@checks $mode:ident $make:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let harness = $crate::store_suite!(@harness $mode $make, $check);
                $crate::suite::report(
                    stringify!($check),
                    $crate::suite::$check(&harness).await,
                );
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+).into());
        }
    };
}

macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($fmt:tt)+) => {{
        let (left, right) = (&$left, &$right);
        if left != right {
            return Err(format!(
                "{}: expected {:?}, got {:?}",
                format_args!($($fmt)+),
                right,
                left
            )
            .into());
        }
    }};
}

/// Turns a store error into a message naming the call that failed.
trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for StoreResult<T> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error {e:?}"))
    }
}

/// Checks that `result` failed with an error `matches` accepts.
fn expect_err<T: Debug>(
    result: StoreResult<T>,
    matches: impl Fn(&StoreError) -> bool,
    what: &str,
) -> Result<StoreError, String> {
    match result {
        Err(e) if matches(&e) => Ok(e),
        other => Err(format!("{what}: got {other:?}")),
    }
}

fn is_unknown(e: &StoreError) -> bool {
    matches!(e, StoreError::UnknownTopicOrPartition { .. })
}

fn is_out_of_range(e: &StoreError) -> bool {
    matches!(e, StoreError::OffsetOutOfRange { .. })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Settings that keep records forever, so only the checks that test retention see any.
fn keep_forever() -> TopicConfig {
    TopicConfig {
        retention_ms: -1,
        retention_bytes: -1,
        ..TopicConfig::KAFKA_DEFAULT
    }
}

/// A producer's base offset: anything but what the store will assign, so the checks see
/// the store rewrite it.
const PRODUCER_BASE_OFFSET: i64 = 1_000_000;

fn record(timestamp: i64, key: Option<&str>, value: Option<&str>) -> NewRecord {
    NewRecord {
        timestamp,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: vec![],
    }
}

fn encode_with(options: &BatchOptions, records: &[NewRecord]) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    encode_batch(options, records, &mut out).map_err(|e| format!("encode batch: {e}"))?;
    Ok(out.freeze())
}

fn encode(records: &[NewRecord]) -> Result<Bytes, String> {
    encode_with(
        &BatchOptions {
            base_offset: PRODUCER_BASE_OFFSET,
            ..BatchOptions::default()
        },
        records,
    )
}

/// A batch of `count` records at `timestamp` whose values start with `tag`.
fn batch(count: usize, timestamp: i64, tag: &str) -> Result<Bytes, String> {
    let records: Vec<NewRecord> = (0..count)
        .map(|i| record(timestamp, None, Some(&format!("{tag}-{i}"))))
        .collect();
    encode(&records)
}

/// A one-record batch whose value is `size` bytes, so batch sizes are easy to reason about.
fn sized_batch(size: usize, timestamp: i64) -> Result<Bytes, String> {
    encode(&[NewRecord {
        timestamp,
        key: None,
        value: Some(Bytes::from(vec![b'x'; size])),
        headers: vec![],
    }])
}

fn header(bytes: &Bytes) -> Result<BatchHeader, String> {
    BatchHeader::parse(bytes).map_err(|e| format!("parse stored batch header: {e}"))
}

/// The records of a stored batch as (offset, timestamp, key, value).
type Rec = (i64, i64, Option<Bytes>, Option<Bytes>);

fn records_of(bytes: &Bytes) -> Result<Vec<Rec>, String> {
    let batch = RecordBatch::decode(bytes, &DecodeLimits::default())
        .map_err(|e| format!("stored batch no longer decodes: {e}"))?;
    let records = batch.records().map_err(|e| format!("records: {e}"))?;
    records
        .map(|r| {
            r.map(|r| (r.offset, r.timestamp, r.key, r.value))
                .map_err(|e| format!("record: {e}"))
        })
        .collect()
}

/// Checks encoded batches as the broker does before appending them.
pub fn valid(batches: Vec<Bytes>) -> Result<Vec<ValidBatch>, String> {
    batches
        .iter()
        .map(|b| ValidBatch::from_bytes(b, &DecodeLimits::default()).map_err(|e| e.to_string()))
        .collect()
}

async fn append(
    h: &Harness,
    topic: &str,
    partition: i32,
    batches: Vec<Bytes>,
) -> Result<i64, String> {
    h.log
        .append(topic, partition, valid(batches)?, now_ms())
        .await
        .map(|o| o.base_offset)
        .ctx(&format!("append to {topic}/{partition}"))
}

async fn watermarks(h: &Harness, topic: &str, partition: i32) -> Result<(i64, i64), String> {
    let w = h
        .log
        .watermarks(topic, partition)
        .await
        .ctx(&format!("watermarks of {topic}/{partition}"))?;
    Ok((w.log_start_offset, w.high_watermark))
}

/// Every batch from `offset` to the high watermark, in as many reads as it takes.
async fn read_all(h: &Harness, topic: &str, mut offset: i64) -> Result<Vec<Bytes>, String> {
    let mut out = Vec::new();
    loop {
        let read = h
            .log
            .read(topic, 0, offset, 1 << 20)
            .await
            .ctx(&format!("read {topic}/0 at {offset}"))?;
        let Some(last) = read.batches.last() else {
            ensure_eq!(
                offset,
                read.watermarks.high_watermark,
                "an empty read ends at the high watermark"
            );
            return Ok(out);
        };
        offset = header(last)?.next_offset();
        out.extend(read.batches);
    }
}

async fn partition_count(h: &Harness, name: &str) -> Result<i32, String> {
    h.log
        .topic(name)
        .await
        .ctx("topic")?
        .map(|t| t.partitions)
        .ok_or_else(|| format!("topic {name} missing"))
}

/// `offset_for_timestamp`, with the timestamp of the hit relative to `t`.
async fn lookup(h: &Harness, name: &str, t: i64, ts: i64) -> Result<Option<(i64, i64)>, String> {
    h.log
        .offset_for_timestamp(name, 0, ts)
        .await
        .map(|hit| hit.map(|hit| (hit.offset, hit.timestamp - t)))
        .ctx(&format!("offset_for_timestamp(t{:+})", ts - t))
}

/// `max_timestamp`, with the timestamp of the hit relative to `t`.
async fn max_timestamp(h: &Harness, name: &str, t: i64) -> Result<Option<(i64, i64)>, String> {
    h.log
        .max_timestamp(name, 0)
        .await
        .map(|hit| hit.map(|hit| (hit.offset, hit.timestamp - t)))
        .ctx("max_timestamp")
}

fn committed(offset: i64, metadata: Option<&str>) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 3,
        metadata: metadata.map(str::to_owned),
        commit_timestamp: 1_700_000_000_000 + offset,
    }
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// Create, describe (by name, by id, in the listing) and delete topics; ids are non-zero
/// and distinct, and a recreated topic starts empty with a new id.
pub async fn topic_lifecycle(h: &Harness) -> CheckResult {
    let config = TopicConfig {
        retention_ms: 3_600_000,
        retention_bytes: 1 << 20,
        max_message_bytes: 500_000,
        ..TopicConfig::default()
    };
    let name = h.name("lifecycle-b");
    let info = h
        .log
        .create_topic(
            NewTopic {
                name: name.clone(),
                partitions: 3,
                config: config.clone(),
            },
            false,
        )
        .await
        .ctx("create topic")?;
    ensure_eq!(info.name, name, "created topic name");
    ensure_eq!(info.partitions, 3, "created partition count");
    ensure_eq!(info.config, config, "created config");
    ensure!(info.id != 0, "topic id must not be zero");

    let by_name = h.log.topic(&name).await.ctx("topic by name")?;
    ensure_eq!(by_name, Some(info.clone()), "topic by name");
    let by_id = h.log.topic_by_id(info.id).await.ctx("topic by id")?;
    ensure_eq!(by_id, Some(info.clone()), "topic by id");

    let other = h.create("lifecycle-a", 1, keep_forever()).await?;
    let other_info = h
        .log
        .topic(&other)
        .await
        .ctx("second topic")?
        .ok_or("second topic missing")?;
    ensure!(
        other_info.id != info.id && other_info.id != 0,
        "topic ids must be distinct and non-zero: {:032x} vs {:032x}",
        other_info.id,
        info.id
    );
    let listed: Vec<String> = h
        .log
        .topics()
        .await
        .ctx("topics")?
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(&h.name("lifecycle-")))
        .collect();
    ensure_eq!(
        listed,
        vec![other.clone(), name.clone()],
        "topics sorted by name"
    );

    h.log.delete_topic(&name).await.ctx("delete topic")?;
    ensure_eq!(
        h.log.topic(&name).await.ctx("topic after delete")?,
        None,
        "deleted topic by name"
    );
    ensure_eq!(
        h.log.topic_by_id(info.id).await.ctx("id after delete")?,
        None,
        "deleted topic by id"
    );
    expect_err(
        h.log.delete_topic(&name).await,
        is_unknown,
        "deleting a deleted topic",
    )?;
    expect_err(
        h.log.watermarks(&name, 0).await,
        is_unknown,
        "watermarks of a deleted topic",
    )?;
    ensure!(
        h.log.watch(&name, 0).is_none(),
        "watch of a deleted topic must be None"
    );

    let recreated = h.create("lifecycle-b", 1, keep_forever()).await?;
    let again = h
        .log
        .topic(&recreated)
        .await
        .ctx("recreated topic")?
        .ok_or("recreated topic missing")?;
    ensure!(
        again.id != info.id,
        "a recreated topic gets a new id, got the old {:032x}",
        info.id
    );
    ensure_eq!(
        watermarks(h, &recreated, 0).await?,
        (0, 0),
        "a recreated topic starts empty"
    );
    Ok(())
}

/// A topic created with several settings named on it, typed and untyped ones alike,
/// reads them back identically, and so it does after `set_topic_config` changes, adds
/// and removes some.
pub async fn topic_overrides_read_back(h: &Harness) -> CheckResult {
    let defaults = keep_forever();
    let mut config = defaults.clone();
    for (name, value) in [
        ("cleanup.policy", "compact,delete"),
        ("compression.type", "lz4"),
        ("delete.retention.ms", "900"),
        ("min.cleanable.dirty.ratio", "0.25"),
        ("segment.jitter.ms", "10"),
        ("min.insync.replicas", "2"),
        ("preallocate", "true"),
        ("leader.replication.throttled.replicas", "0:1,1:1"),
    ] {
        config
            .set(&defaults, name, Some(value))
            .map_err(|e| format!("{name}={value}: {e}"))?;
    }
    let name = h.create("overrides", 1, config.clone()).await?;
    let read = async |what: &str| -> Result<crate::TopicInfo, String> {
        h.log
            .topic(&name)
            .await
            .ctx(what)?
            .ok_or_else(|| format!("{what}: topic missing"))
    };
    let info = read("topic after create").await?;
    ensure_eq!(info.config, config, "settings after create");
    ensure_eq!(
        info.config.overrides.len(),
        8,
        "every named setting kept after create"
    );

    for (name, value) in [
        ("compression.type", Some("zstd")),
        ("preallocate", None),
        ("cleanup.policy", None),
        ("message.timestamp.type", Some("LogAppendTime")),
        ("flush.ms", Some("1000")),
    ] {
        config
            .set(&defaults, name, value)
            .map_err(|e| format!("{name}: {e}"))?;
    }
    h.log
        .set_topic_config(&info.name, config.clone())
        .await
        .ctx("set_topic_config")?;
    let info = read("topic after set_topic_config").await?;
    ensure_eq!(info.config, config, "settings after set_topic_config");
    ensure_eq!(
        TopicConfig::from_overrides(&defaults, &info.config.overrides).ok(),
        Some(config),
        "settings rebuilt from the stored overrides"
    );
    Ok(())
}

/// Duplicate and invalid creates, `validate_only`, `create_partitions` and
/// `set_topic_config`, and unknown topics or partitions.
pub async fn topic_admin(h: &Harness) -> CheckResult {
    let name = h.create("admin", 2, keep_forever()).await?;
    let new = |name: &str, partitions| NewTopic {
        name: name.to_owned(),
        partitions,
        config: keep_forever(),
    };
    expect_err(
        h.log.create_topic(new(&name, 2), false).await,
        |e| matches!(e, StoreError::TopicAlreadyExists(_)),
        "creating an existing topic",
    )?;
    expect_err(
        h.log.create_topic(new(&name, 2), true).await,
        |e| matches!(e, StoreError::TopicAlreadyExists(_)),
        "validating the creation of an existing topic",
    )?;
    for partitions in [0, -1] {
        let bad = h.name(&format!("admin-bad{}", -partitions));
        expect_err(
            h.log.create_topic(new(&bad, partitions), false).await,
            |e| matches!(e, StoreError::InvalidPartitions(_)),
            &format!("creating a topic with {partitions} partitions"),
        )?;
        ensure_eq!(
            h.log.topic(&bad).await.ctx("refused topic")?,
            None,
            "a refused topic must not exist"
        );
    }

    let dry = h.name("admin-dry");
    let info = h
        .log
        .create_topic(new(&dry, 4), true)
        .await
        .ctx("validate-only create")?;
    ensure_eq!(
        (info.name.as_str(), info.partitions),
        (dry.as_str(), 4),
        "validate-only create describes the topic"
    );
    ensure_eq!(
        h.log.topic(&dry).await.ctx("validate-only topic")?,
        None,
        "validate-only create must not create"
    );

    for total in [2, 1, 0] {
        expect_err(
            h.log.create_partitions(&name, total, false).await,
            |e| matches!(e, StoreError::InvalidPartitions(_)),
            &format!("create_partitions to {total} from 2"),
        )?;
    }
    h.log
        .create_partitions(&name, 4, true)
        .await
        .ctx("validate-only create_partitions")?;
    ensure_eq!(
        partition_count(h, &name).await?,
        2,
        "validate-only create_partitions must not add partitions"
    );
    h.log
        .create_partitions(&name, 4, false)
        .await
        .ctx("create_partitions")?;
    ensure_eq!(
        partition_count(h, &name).await?,
        4,
        "partitions after create_partitions"
    );
    ensure_eq!(
        watermarks(h, &name, 3).await?,
        (0, 0),
        "a new partition is empty"
    );
    ensure_eq!(
        append(h, &name, 3, vec![batch(2, now_ms(), "p3")?]).await?,
        0,
        "first offset in a new partition"
    );
    expect_err(
        h.log
            .create_partitions(&h.name("admin-missing"), 4, false)
            .await,
        is_unknown,
        "create_partitions of an unknown topic",
    )?;

    let config = TopicConfig {
        retention_ms: 1_000,
        retention_bytes: 4_096,
        max_message_bytes: 2_048,
        ..TopicConfig::default()
    };
    h.log
        .set_topic_config(&name, config.clone())
        .await
        .ctx("set_topic_config")?;
    let info = h
        .log
        .topic(&name)
        .await
        .ctx("topic after set_topic_config")?
        .ok_or("topic missing after set_topic_config")?;
    ensure_eq!(info.config, config, "config after set_topic_config");
    expect_err(
        h.log
            .set_topic_config(&h.name("admin-missing"), config)
            .await,
        is_unknown,
        "set_topic_config of an unknown topic",
    )?;

    for partition in [4, -1, i32::MAX] {
        expect_err(
            h.log.watermarks(&name, partition).await,
            is_unknown,
            &format!("watermarks of partition {partition}"),
        )?;
        expect_err(
            h.log
                .append(
                    &name,
                    partition,
                    valid(vec![batch(1, now_ms(), "x")?])?,
                    now_ms(),
                )
                .await,
            is_unknown,
            &format!("append to partition {partition}"),
        )?;
        expect_err(
            h.log.read(&name, partition, 0, 1024).await,
            is_unknown,
            &format!("read of partition {partition}"),
        )?;
    }
    expect_err(
        h.log.read(&h.name("admin-missing"), 0, 0, 1024).await,
        is_unknown,
        "read of an unknown topic",
    )?;
    Ok(())
}

/// Offsets are consecutive across the batches of one call and across calls, the
/// producer's base offset is replaced, and partitions count separately.
pub async fn append_assigns_consecutive_offsets(h: &Harness) -> CheckResult {
    let name = h.create("offsets", 2, keep_forever()).await?;
    let ts = now_ms();
    let outcome = h
        .log
        .append(
            &name,
            0,
            valid(vec![
                batch(3, ts, "a")?,
                batch(1, ts, "b")?,
                batch(2, ts, "c")?,
            ])?,
            ts,
        )
        .await
        .ctx("append three batches")?;
    ensure_eq!(outcome.base_offset, 0, "base offset of the first append");
    ensure_eq!(
        outcome.log_start_offset,
        0,
        "log start after the first append"
    );
    ensure_eq!(
        outcome.log_append_time,
        -1,
        "log append time under CreateTime"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, 6),
        "watermarks after 6 records"
    );
    ensure_eq!(
        append(h, &name, 0, vec![batch(2, ts, "d")?]).await?,
        6,
        "base offset of the second append"
    );
    ensure_eq!(
        watermarks(h, &name, 1).await?,
        (0, 0),
        "the other partition"
    );
    ensure_eq!(
        append(h, &name, 1, vec![batch(1, ts, "e")?]).await?,
        0,
        "first offset of the other partition"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, 8),
        "partition 0 unaffected"
    );

    let batches = read_all(h, &name, 0).await?;
    let bases: Vec<i64> = batches
        .iter()
        .map(|b| header(b).map(|h| h.base_offset))
        .collect::<Result<_, _>>()?;
    ensure_eq!(bases, vec![0, 3, 4, 6], "stored base offsets");
    let offsets: Vec<i64> = batches
        .iter()
        .map(records_of)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .map(|r| r.0)
        .collect();
    ensure_eq!(offsets, (0..8).collect::<Vec<_>>(), "record offsets");
    Ok(())
}

/// Batches come back byte for byte (bar the rewritten base offset), compressed or not,
/// with keys, values, null fields and headers intact.
pub async fn read_back_byte_exact(h: &Harness) -> CheckResult {
    let name = h.create("exact", 1, keep_forever()).await?;
    let ts = now_ms() - 5_000;
    let records = vec![
        NewRecord {
            timestamp: ts,
            key: Some(Bytes::from_static(b"key-1")),
            value: Some(Bytes::from_static(b"value-1")),
            headers: vec![
                Header::new(Bytes::from_static(b"h1"), Some(Bytes::from_static(b"v1"))),
                Header::new(Bytes::from_static(b"h1"), None),
            ],
        },
        record(ts + 7, None, Some("no key")),
        record(ts - 3, Some("tombstone"), None),
        record(ts + 1, Some(""), Some("")),
    ];
    let plain = encode(&records)?;
    let gzip = encode_with(
        &BatchOptions {
            base_offset: PRODUCER_BASE_OFFSET,
            compression: Compression::Gzip,
            producer_id: 42,
            producer_epoch: 1,
            base_sequence: 0,
            ..BatchOptions::default()
        },
        &records,
    )?;
    let sent = vec![plain, gzip];
    append(h, &name, 0, sent.clone()).await?;
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), 2, "batches read back");
    for (i, (sent, got)) in sent.iter().zip(&got).enumerate() {
        let base = (i * records.len()) as i64;
        ensure_eq!(header(got)?.base_offset, base, "base offset of batch {i}");
        ensure!(
            got.len() == sent.len() && got[8..] == sent[8..],
            "batch {i} must come back byte for byte after the base offset"
        );
        let decoded = records_of(got)?;
        let expected: Vec<Rec> = records
            .iter()
            .enumerate()
            .map(|(j, r)| (base + j as i64, r.timestamp, r.key.clone(), r.value.clone()))
            .collect();
        ensure_eq!(decoded, expected, "records of batch {i}");
    }
    Ok(())
}

/// Batches the store prepared ahead of their appends ([`LogStore::prepare`], as the
/// broker does on its validation threads) read back as the same batches as unprepared
/// ones: records with and without keys and headers, a compressed batch, a clone of a
/// prepared batch appended a second time, and a batch prepared for another partition.
pub async fn prepared_appends_read_back(h: &Harness) -> CheckResult {
    let name = h.create("prepared", 2, keep_forever()).await?;
    let ts = now_ms() - 5_000;
    let plain: Vec<NewRecord> = (0..50)
        .map(|i| record(ts + i, None, Some(&format!("value-{i}"))))
        .collect();
    let mixed = vec![
        record(ts, Some("key-1"), Some("keyed")),
        NewRecord {
            timestamp: ts + 1,
            key: None,
            value: Some(Bytes::from_static(b"with a header")),
            headers: vec![Header::new(
                Bytes::from_static(b"h"),
                Some(Bytes::from_static(b"v")),
            )],
        },
        record(ts + 2, Some("tombstone"), None),
        record(ts + 3, Some(""), Some("")),
    ];
    let gzip = encode_with(
        &BatchOptions {
            base_offset: PRODUCER_BASE_OFFSET,
            compression: Compression::Gzip,
            ..BatchOptions::default()
        },
        &plain,
    )?;
    let sent = [encode(&plain)?, encode(&mixed)?, gzip];
    let mut appended: Vec<(Bytes, Vec<NewRecord>)> = Vec::new();
    for (bytes, records) in sent.iter().zip([&plain, &mixed, &plain]) {
        let batch = valid(vec![bytes.clone()])?.remove(0);
        let batch = match h.log.prepare(&name, 0, &batch) {
            Some(prepared) => batch.with_prepared(prepared),
            None => batch,
        };
        let again = batch.clone();
        h.log
            .append(&name, 0, vec![batch], now_ms())
            .await
            .ctx("append a prepared batch")?;
        h.log
            .append(&name, 0, vec![again], now_ms())
            .await
            .ctx("append a clone of a prepared batch")?;
        appended.push((bytes.clone(), records.clone()));
        appended.push((bytes.clone(), records.clone()));
    }
    // Prepared for partition 1, appended to partition 0: the partition is the append's.
    let batch = valid(vec![sent[1].clone()])?.remove(0);
    let batch = match h.log.prepare(&name, 1, &batch) {
        Some(prepared) => batch.with_prepared(prepared),
        None => batch,
    };
    h.log
        .append(&name, 0, vec![batch], now_ms())
        .await
        .ctx("append a batch prepared for another partition")?;
    appended.push((sent[1].clone(), mixed.clone()));
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), appended.len(), "batches read back");
    let mut base = 0i64;
    for (i, ((sent, records), got)) in appended.iter().zip(&got).enumerate() {
        ensure_eq!(header(got)?.base_offset, base, "base offset of batch {i}");
        ensure!(
            got.len() == sent.len() && got[8..] == sent[8..],
            "batch {i} must come back byte for byte after the base offset"
        );
        let expected: Vec<Rec> = records
            .iter()
            .enumerate()
            .map(|(j, r)| (base + j as i64, r.timestamp, r.key.clone(), r.value.clone()))
            .collect();
        ensure_eq!(records_of(got)?, expected, "records of batch {i}");
        base += records.len() as i64;
    }
    let other = h
        .log
        .watermarks(&name, 1)
        .await
        .ctx("watermarks of partition 1")?;
    ensure_eq!(other.high_watermark, 0, "records in partition 1");
    Ok(())
}

/// A batch sent with another partition leader epoch (the Java producer sends -1) and
/// stamped with the broker's ([`ValidBatch::with_leader_epoch`], which writes it in the
/// header only) reads back with the stamped epoch and otherwise byte for byte: appended
/// as it is, prepared after the stamp ([`LogStore::prepare`]), and prepared in the
/// check's walk for the stamped epoch ([`LogStore::preparer`]), as the broker does.
pub async fn stamped_leader_epoch_is_stored(h: &Harness) -> CheckResult {
    let name = h.create("stamped-epoch", 1, keep_forever()).await?;
    let ts = now_ms() - 5_000;
    let records: Vec<NewRecord> = (0..20)
        .map(|i| record(ts + i, (i % 3 == 0).then_some("k"), Some(&format!("v-{i}"))))
        .collect();
    let mut sent = Vec::new();
    for epoch in [-1, 7, 0] {
        sent.push(encode_with(
            &BatchOptions {
                base_offset: PRODUCER_BASE_OFFSET,
                partition_leader_epoch: epoch,
                ..BatchOptions::default()
            },
            &records,
        )?);
    }
    let limits = DecodeLimits::default();
    for bytes in &sent {
        // As it is.
        let batch = valid(vec![bytes.clone()])?.remove(0).with_leader_epoch(0);
        // Prepared after the stamp.
        let prepared = valid(vec![bytes.clone()])?.remove(0).with_leader_epoch(0);
        let prepared = match h.log.prepare(&name, 0, &prepared) {
            Some(p) => prepared.with_prepared(p),
            None => prepared,
        };
        // Prepared in the check's walk, told the epoch stamped after it.
        let mut sink_for =
            |b: &RecordBatch, section: &Bytes| h.log.preparer(&name, 0, b, section, 0);
        let walked = crate::check_batches_with(bytes, &limits, &mut sink_for)
            .map_err(|e| format!("check: {e}"))?
            .batches
            .remove(0);
        let kept = walked.prepared().cloned();
        let walked = walked.with_leader_epoch(0);
        let walked = match kept {
            Some(p) => walked.with_prepared(p),
            None => walked,
        };
        for (how, batch) in [("as is", batch), ("prepared", prepared), ("walked", walked)] {
            h.log
                .append(&name, 0, vec![batch], now_ms())
                .await
                .ctx(&format!("append a stamped batch {how}"))?;
        }
    }
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), 9, "batches read back");
    for (i, got) in got.iter().enumerate() {
        let sent = &sent[i / 3];
        let h = header(got)?;
        ensure_eq!(h.base_offset, i as i64 * 20, "base offset of batch {i}");
        ensure_eq!(h.partition_leader_epoch, 0, "leader epoch of batch {i}");
        ensure!(
            got.len() == sent.len() && got[16..] == sent[16..],
            "batch {i} must come back byte for byte after the leader epoch"
        );
        let expected: Vec<Rec> = records
            .iter()
            .enumerate()
            .map(|(j, r)| {
                (
                    h.base_offset + j as i64,
                    r.timestamp,
                    r.key.clone(),
                    r.value.clone(),
                )
            })
            .collect();
        ensure_eq!(records_of(got)?, expected, "records of batch {i}");
    }
    Ok(())
}

/// Batches a producer encoded in a form other than the shortest one (a varint in more
/// bytes than needed, a record attribute bit) read back as valid batches with the same
/// records: a store that rebuilds batches must not reuse the producer's CRC for them.
pub async fn read_back_valid_from_any_encoding(h: &Harness) -> CheckResult {
    let name = h.create("encoding", 1, keep_forever()).await?;
    let ts = now_ms() - 5_000;
    let canonical = encode(&[record(ts, Some("k"), Some("v"))])?;
    // Records section: length 8, attributes, timestamp delta, offset delta, key length,
    // key, value length, value, header count.
    let section = [0x10, 0, 0, 0, 0x02, b'k', 0x02, b'v', 0];
    ensure!(
        canonical.get(61..) == Some(&section[..]),
        "the shortest form of the sample record"
    );
    let reframed = |records: &[u8]| -> Result<Bytes, String> {
        let mut b = BytesMut::from(&canonical[..61]);
        b.extend_from_slice(records);
        let len = i32::try_from(b.len() - 12).map_err(|e| e.to_string())?;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(b.freeze())
    };
    // The key length as 0x82 0x00 (also 1), and a record attribute bit.
    let longer = reframed(&[0x12, 0, 0, 0, 0x82, 0x00, b'k', 0x02, b'v', 0])?;
    let attribute = reframed(&[0x10, 1, 0, 0, 0x02, b'k', 0x02, b'v', 0])?;
    for (i, sent) in [longer, attribute].into_iter().enumerate() {
        ensure!(records_of(&sent).is_ok(), "sample {i} is a valid batch");
        append(h, &name, 0, vec![sent]).await?;
    }
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), 2, "batches read back");
    for (i, got) in got.iter().enumerate() {
        let expected: Vec<Rec> = vec![(
            i as i64,
            ts,
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from_static(b"v")),
        )];
        // records_of checks the CRC.
        ensure_eq!(records_of(got)?, expected, "records of batch {i}");
    }
    Ok(())
}

/// Watermarks move with appends; reads at the high watermark are empty, beyond it or
/// below the log start they are out of range; a read starts with the batch holding the
/// offset.
pub async fn watermarks_and_read_bounds(h: &Harness) -> CheckResult {
    let name = h.create("bounds", 1, keep_forever()).await?;
    ensure_eq!(watermarks(h, &name, 0).await?, (0, 0), "empty partition");
    let empty = h
        .log
        .read(&name, 0, 0, 1024)
        .await
        .ctx("read empty partition")?;
    ensure!(
        empty.is_empty(),
        "reading an empty partition returns nothing"
    );
    ensure_eq!(
        (
            empty.watermarks.log_start_offset,
            empty.watermarks.high_watermark
        ),
        (0, 0),
        "watermarks of an empty read"
    );
    for offset in [1, -1] {
        expect_err(
            h.log.read(&name, 0, offset, 1024).await,
            is_out_of_range,
            &format!("read at {offset} of an empty partition"),
        )?;
    }

    let ts = now_ms();
    append(h, &name, 0, vec![batch(2, ts, "a")?, batch(2, ts, "b")?]).await?;
    ensure_eq!(watermarks(h, &name, 0).await?, (0, 4), "after 4 records");
    let at_hw = h.log.read(&name, 0, 4, 1 << 20).await.ctx("read at HW")?;
    ensure!(
        at_hw.is_empty(),
        "a read at the high watermark returns nothing"
    );
    ensure_eq!(at_hw.watermarks.high_watermark, 4, "HW reported by a read");
    expect_err(
        h.log.read(&name, 0, 5, 1 << 20).await,
        is_out_of_range,
        "read beyond the high watermark",
    )?;
    let mid = h.log.read(&name, 0, 3, 1 << 20).await.ctx("read at 3")?;
    ensure_eq!(mid.batches.len(), 1, "batches from offset 3");
    ensure_eq!(
        header(&mid.batches[0])?.base_offset,
        2,
        "a read starts with the batch holding the offset"
    );

    h.log
        .delete_records(&name, 0, 2)
        .await
        .ctx("delete_records")?;
    let err = expect_err(
        h.log.read(&name, 0, 1, 1 << 20).await,
        is_out_of_range,
        "read below the log start",
    )?;
    if let StoreError::OffsetOutOfRange {
        offset,
        log_start_offset,
        high_watermark,
    } = err
    {
        ensure_eq!(
            (offset, log_start_offset, high_watermark),
            (1, 2, 4),
            "fields of OffsetOutOfRange"
        );
    }
    Ok(())
}

/// `max_bytes` bounds a read, yet the first batch always comes back whole (KIP-74).
pub async fn read_honours_max_bytes(h: &Harness) -> CheckResult {
    let name = h.create("maxbytes", 1, keep_forever()).await?;
    let ts = now_ms();
    let batches = vec![
        sized_batch(200, ts)?,
        sized_batch(200, ts)?,
        sized_batch(200, ts)?,
    ];
    let size = batches[0].len();
    append(h, &name, 0, batches).await?;
    for (max_bytes, expected) in [
        (0, 1),
        (1, 1),
        (size, 1),
        (2 * size - 1, 1),
        (2 * size, 2),
        (3 * size - 1, 2),
        (3 * size, 3),
        (usize::MAX, 3),
    ] {
        let read = h
            .log
            .read(&name, 0, 0, max_bytes)
            .await
            .ctx(&format!("read with max_bytes {max_bytes}"))?;
        ensure_eq!(
            read.batches.len(),
            expected,
            "batches read with max_bytes {max_bytes} (batch size {size})"
        );
        ensure!(
            expected == 1 || read.len() <= max_bytes,
            "{} bytes read with max_bytes {max_bytes}",
            read.len()
        );
    }
    let read = h.log.read(&name, 0, 2, 1).await.ctx("read at 2")?;
    ensure_eq!(read.batches.len(), 1, "a read from the last batch");
    ensure_eq!(header(&read.batches[0])?.base_offset, 2, "the last batch");
    Ok(())
}

/// A batch above the topic's `max.message.bytes` is refused, and with it the whole call.
pub async fn message_too_large(h: &Harness) -> CheckResult {
    let config = TopicConfig {
        max_message_bytes: 512,
        ..keep_forever()
    };
    let name = h.create("toolarge", 1, config).await?;
    let ts = now_ms();
    let small = sized_batch(10, ts)?;
    let big = sized_batch(1_000, ts)?;
    expect_err(
        h.log.append(&name, 0, valid(vec![big.clone()])?, ts).await,
        |e| matches!(e, StoreError::MessageTooLarge { .. }),
        "appending a batch over max.message.bytes",
    )?;
    expect_err(
        h.log
            .append(&name, 0, valid(vec![small.clone(), big])?, ts)
            .await,
        |e| matches!(e, StoreError::MessageTooLarge { .. }),
        "appending a small and a too large batch",
    )?;
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, 0),
        "nothing of a refused append lands"
    );
    ensure_eq!(
        append(h, &name, 0, vec![small]).await?,
        0,
        "a small batch still fits"
    );
    Ok(())
}

/// `offset_for_timestamp` finds the exact first record at or after a timestamp, even
/// when timestamps are out of order and when the log start falls inside a batch;
/// `max_timestamp` finds the first record with the largest timestamp.
pub async fn timestamps(h: &Harness) -> CheckResult {
    let name = h.create("timestamps", 1, keep_forever()).await?;
    ensure_eq!(
        h.log
            .offset_for_timestamp(&name, 0, 0)
            .await
            .ctx("lookup in empty")?,
        None,
        "timestamp lookup in an empty partition"
    );
    ensure_eq!(
        h.log.max_timestamp(&name, 0).await.ctx("max in empty")?,
        None,
        "max timestamp of an empty partition"
    );

    let t = now_ms() - 60_000;
    let at = |deltas: &[i64]| -> Result<Bytes, String> {
        let records: Vec<NewRecord> = deltas
            .iter()
            .map(|d| record(t + d, None, Some("v")))
            .collect();
        encode(&records)
    };
    // offsets:  0    1    2  | 3    4  | 5    6
    // times:  100  300  200  | 250  400 | 400  150
    append(h, &name, 0, vec![at(&[100, 300, 200])?, at(&[250, 400])?]).await?;
    append(h, &name, 0, vec![at(&[400, 150])?]).await?;

    for (delta, expected) in [
        (-1_000_000, Some((0, 100))),
        (100, Some((0, 100))),
        (101, Some((1, 300))),
        (250, Some((1, 300))),
        (301, Some((4, 400))),
        (400, Some((4, 400))),
        (401, None),
    ] {
        ensure_eq!(
            lookup(h, &name, t, t + delta).await?,
            expected,
            "offset_for_timestamp(t+{delta})"
        );
    }
    ensure_eq!(
        max_timestamp(h, &name, t).await?,
        Some((4, 400)),
        "max_timestamp"
    );

    // The log start inside the first batch hides offsets 0 and 1.
    h.log
        .delete_records(&name, 0, 2)
        .await
        .ctx("delete_records(2)")?;
    ensure_eq!(
        lookup(h, &name, t, t + 100).await?,
        Some((2, 200)),
        "lookup after delete_records(2)"
    );
    ensure_eq!(
        lookup(h, &name, t, t + 201).await?,
        Some((3, 250)),
        "lookup after delete_records(2)"
    );
    ensure_eq!(
        max_timestamp(h, &name, t).await?,
        Some((4, 400)),
        "max after delete_records(2)"
    );
    // The log start inside the last batch hides offsets up to 4.
    h.log
        .delete_records(&name, 0, 5)
        .await
        .ctx("delete_records(5)")?;
    ensure_eq!(
        lookup(h, &name, t, t + 100).await?,
        Some((5, 400)),
        "lookup after delete_records(5)"
    );
    ensure_eq!(
        max_timestamp(h, &name, t).await?,
        Some((5, 400)),
        "max after delete_records(5)"
    );
    h.log
        .delete_records(&name, 0, 6)
        .await
        .ctx("delete_records(6)")?;
    ensure_eq!(
        lookup(h, &name, t, t + 100).await?,
        Some((6, 150)),
        "lookup after delete_records(6)"
    );
    ensure_eq!(
        max_timestamp(h, &name, t).await?,
        Some((6, 150)),
        "max after delete_records(6)"
    );
    h.log
        .delete_records(&name, 0, -1)
        .await
        .ctx("delete_records(-1)")?;
    ensure_eq!(
        lookup(h, &name, t, t).await?,
        None,
        "lookup with every record deleted"
    );
    ensure_eq!(
        max_timestamp(h, &name, t).await?,
        None,
        "max with every record deleted"
    );
    Ok(())
}

/// Records with keys, null values and headers, at distinct times, from one idempotent
/// producer: what the topic-setting checks store in other shapes.
fn producer_records(t: i64) -> Vec<NewRecord> {
    (0..6)
        .map(|i| NewRecord {
            timestamp: t + 10 * i,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: (i != 3).then(|| Bytes::from(format!("value-{i}-").repeat(20))),
            headers: vec![Header::new(
                format!("h{i}"),
                Some(Bytes::from(format!("{i}"))),
            )],
        })
        .collect()
}

/// The records of a stored batch, as a producer would have given them.
fn new_records_of(bytes: &Bytes) -> Result<Vec<NewRecord>, String> {
    let batch = RecordBatch::decode(bytes, &DecodeLimits::default())
        .map_err(|e| format!("stored batch no longer decodes: {e}"))?;
    batch
        .records()
        .map_err(|e| format!("records: {e}"))?
        .map(|r| r.map(NewRecord::from).map_err(|e| format!("record: {e}")))
        .collect()
}

/// A topic's `compression.type` as the broker applies it ([`ValidBatch::restamped`]):
/// whatever codec the producer used, the batch read back carries the topic's codec,
/// the same records (keys, values, headers, timestamps), the producer's id, epoch and
/// sequence, and a valid CRC.
pub async fn topic_codec_round_trip(h: &Harness) -> CheckResult {
    let name = h.create("codec", 1, keep_forever()).await?;
    let t = now_ms() - 30_000;
    let sent = producer_records(t);
    let codecs = [
        (Compression::Lz4, Compression::None),
        (Compression::None, Compression::Gzip),
        (Compression::Zstd, Compression::Snappy),
        (Compression::Gzip, Compression::Lz4),
        (Compression::Snappy, Compression::Zstd),
    ];
    for (i, (from, to)) in codecs.into_iter().enumerate() {
        let options = BatchOptions {
            base_offset: PRODUCER_BASE_OFFSET,
            compression: from,
            producer_id: 4242,
            producer_epoch: 3,
            base_sequence: i32::try_from(i * sent.len()).map_err(|e| e.to_string())?,
            partition_leader_epoch: 0,
            ..BatchOptions::default()
        };
        let batch = valid(vec![encode_with(&options, &sent)?])?
            .into_iter()
            .map(|b| b.restamped(Some(to), None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("restamp {from:?} -> {to:?}: {e}"))?;
        h.log
            .append(&name, 0, batch, now_ms())
            .await
            .ctx(&format!("append {from:?} as {to:?}"))?;
    }
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), codecs.len(), "batches read back");
    for (i, (bytes, (from, to))) in got.iter().zip(codecs).enumerate() {
        let batch = RecordBatch::decode(bytes, &DecodeLimits::default())
            .map_err(|e| format!("batch {i} ({from:?} stored as {to:?}): {e}"))?;
        ensure_eq!(
            batch.compression(),
            to,
            "codec of batch {i} sent as {from:?}"
        );
        let hd = batch.header();
        ensure_eq!(
            (
                hd.producer_id,
                hd.producer_epoch,
                hd.base_sequence,
                hd.record_count
            ),
            (4242, 3, (i * sent.len()) as i32, sent.len() as i32),
            "producer identity of batch {i}"
        );
        ensure_eq!(
            hd.base_offset,
            (i * sent.len()) as i64,
            "base offset of batch {i}"
        );
        ensure_eq!(
            hd.attributes.timestamp_type(),
            TimestampType::CreateTime,
            "timestamp type of batch {i}"
        );
        ensure_eq!(
            new_records_of(bytes)?,
            sent,
            "records of batch {i} ({from:?} -> {to:?})"
        );
    }
    Ok(())
}

/// `message.timestamp.type=LogAppendTime` as the broker applies it: the batch read back
/// has the LogAppendTime bit and the append time as `maxTimestamp`, every record reads
/// as that time, the topic's codec is kept, and lookups by time see the append time,
/// not the producer's.
pub async fn log_append_time_round_trip(h: &Harness) -> CheckResult {
    let name = h.create("log-append-time", 1, keep_forever()).await?;
    let producer_time = now_ms() - 3_600_000;
    let sent = producer_records(producer_time);
    let appended_at = now_ms();
    for (i, codec) in [Compression::None, Compression::Gzip]
        .into_iter()
        .enumerate()
    {
        let options = BatchOptions {
            base_offset: PRODUCER_BASE_OFFSET,
            compression: Compression::Lz4,
            ..BatchOptions::default()
        };
        let at = appended_at + i as i64;
        let batch = valid(vec![encode_with(&options, &sent)?])?
            .into_iter()
            .map(|b| b.restamped(Some(codec), Some(at)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("restamp: {e}"))?;
        h.log
            .append(&name, 0, batch, at)
            .await
            .ctx("append a LogAppendTime batch")?;
    }
    let got = read_all(h, &name, 0).await?;
    ensure_eq!(got.len(), 2, "batches read back");
    for (i, (bytes, codec)) in got
        .iter()
        .zip([Compression::None, Compression::Gzip])
        .enumerate()
    {
        let at = appended_at + i as i64;
        let hd = header(bytes)?;
        ensure_eq!(
            hd.attributes.timestamp_type(),
            TimestampType::LogAppendTime,
            "timestamp type of batch {i}"
        );
        ensure_eq!(hd.max_timestamp, at, "maxTimestamp of batch {i}");
        let batch = RecordBatch::decode(bytes, &DecodeLimits::default())
            .map_err(|e| format!("batch {i}: {e}"))?;
        ensure_eq!(batch.compression(), codec, "codec of batch {i}");
        let records = new_records_of(bytes)?;
        let times: Vec<i64> = records.iter().map(|r| r.timestamp).collect();
        ensure_eq!(
            times,
            vec![at; sent.len()],
            "record timestamps of batch {i}"
        );
        let keys: Vec<_> = records.iter().map(|r| (&r.key, &r.value)).collect();
        let want: Vec<_> = sent.iter().map(|r| (&r.key, &r.value)).collect();
        ensure_eq!(keys, want, "keys and values of batch {i}");
    }
    let n = sent.len() as i64;
    ensure_eq!(
        lookup(h, &name, appended_at, producer_time).await?,
        Some((0, 0)),
        "lookup at the producer's time"
    );
    ensure_eq!(
        lookup(h, &name, appended_at, appended_at + 1).await?,
        Some((n, 1)),
        "lookup at the second append time"
    );
    ensure_eq!(
        lookup(h, &name, appended_at, appended_at + 2).await?,
        None,
        "lookup after the last append time"
    );
    ensure_eq!(
        max_timestamp(h, &name, appended_at).await?,
        Some((n, 1)),
        "max_timestamp"
    );
    Ok(())
}

/// `delete_records` moves the log start (also into a batch), never backwards, -1 means
/// the high watermark, and beyond the high watermark is out of range.
pub async fn delete_records(h: &Harness) -> CheckResult {
    let name = h.create("delete", 1, keep_forever()).await?;
    let ts = now_ms();
    append(
        h,
        &name,
        0,
        vec![batch(2, ts, "a")?, batch(2, ts, "b")?, batch(2, ts, "c")?],
    )
    .await?;
    ensure_eq!(
        h.log
            .delete_records(&name, 0, 3)
            .await
            .ctx("delete_records(3)")?,
        3,
        "new log start"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (3, 6),
        "watermarks after delete_records(3)"
    );
    expect_err(
        h.log.read(&name, 0, 2, 1 << 20).await,
        is_out_of_range,
        "read below the new log start",
    )?;
    let read = h
        .log
        .read(&name, 0, 3, 1 << 20)
        .await
        .ctx("read at the log start")?;
    ensure_eq!(
        header(read.batches.first().ok_or("no batch at the log start")?)?.base_offset,
        2,
        "the batch holding the log start is still served whole"
    );
    ensure_eq!(
        h.log
            .delete_records(&name, 0, 1)
            .await
            .ctx("delete_records(1)")?,
        3,
        "the log start never moves back"
    );
    for bad in [7, -2] {
        expect_err(
            h.log.delete_records(&name, 0, bad).await,
            is_out_of_range,
            &format!("delete_records({bad})"),
        )?;
    }
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (3, 6),
        "refused deletes change nothing"
    );
    ensure_eq!(
        h.log
            .delete_records(&name, 0, -1)
            .await
            .ctx("delete_records(-1)")?,
        6,
        "-1 deletes up to the high watermark"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (6, 6),
        "after deleting everything"
    );
    let read = h.log.read(&name, 0, 6, 1 << 20).await.ctx("read at 6")?;
    ensure!(read.is_empty(), "nothing left to read");
    ensure_eq!(
        append(h, &name, 0, vec![batch(1, ts, "d")?]).await?,
        6,
        "offsets continue after a full delete"
    );
    expect_err(
        h.log.delete_records(&h.name("delete-missing"), 0, 0).await,
        is_unknown,
        "delete_records of an unknown topic",
    )?;
    Ok(())
}

/// A compacted topic read from the start shows the latest value of each key, in offset
/// order with gaps where superseded records were; a tombstone stays until
/// `delete.retention.ms` has passed, then goes; the last batch (the active part of the
/// log) and the high watermark and log start are untouched.
pub async fn compaction_latest_per_key(h: &Harness) -> CheckResult {
    let Some(driver) = h.compaction.clone() else {
        return Err(h.lacks(
            Capability::CompactionOnDemand,
            "no CompactionDriver: the backend cannot compact as of a chosen clock",
        ));
    };
    let config = TopicConfig {
        cleanup_policy: crate::CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        delete_retention_ms: 60_000,
        ..keep_forever()
    };
    let name = h.create("compacted", 1, config).await?;
    let t = now_ms();
    let kv = |k: &str, v: Option<&str>| record(t, Some(k), v);
    // Offsets: 0 a=1, 1 b=1, 2 c=1 | 3 a=2, 4 b=(tombstone) | 5 c=2, 6 a=3 | 7 d=1, 8 c=3
    append(
        h,
        &name,
        0,
        vec![encode(&[
            kv("a", Some("1")),
            kv("b", Some("1")),
            kv("c", Some("1")),
        ])?],
    )
    .await?;
    append(
        h,
        &name,
        0,
        vec![encode(&[kv("a", Some("2")), kv("b", None)])?],
    )
    .await?;
    append(
        h,
        &name,
        0,
        vec![encode(&[kv("c", Some("2")), kv("a", Some("3"))])?],
    )
    .await?;
    append(
        h,
        &name,
        0,
        vec![encode(&[kv("d", Some("1")), kv("c", Some("3"))])?],
    )
    .await?;

    let view = |batches: Vec<Bytes>| -> Result<Vec<(i64, String, Option<String>)>, String> {
        let mut out = Vec::new();
        for b in &batches {
            for (offset, _, key, value) in records_of(b)? {
                let text = |b: Bytes| String::from_utf8_lossy(&b).into_owned();
                out.push((offset, key.map(text).unwrap_or_default(), value.map(text)));
            }
        }
        Ok(out)
    };
    let s = |v: &str| Some(v.to_owned());
    driver.apply_compaction(t + 10_000).await;
    let seen = view(read_all(h, &name, 0).await?)?;
    let expected = vec![
        (4, "b".to_owned(), None),
        (5, "c".to_owned(), s("2")),
        (6, "a".to_owned(), s("3")),
        // The last batch is never compacted.
        (7, "d".to_owned(), s("1")),
        (8, "c".to_owned(), s("3")),
    ];
    ensure_eq!(
        seen,
        expected,
        "compacted view (offset, key, value) from the start"
    );
    let offsets: Vec<i64> = seen.iter().map(|r| r.0).collect();
    ensure!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "offsets must increase strictly: {offsets:?}"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, 9),
        "compaction keeps the log start and the high watermark"
    );

    // Past delete.retention.ms the tombstone goes.
    driver.apply_compaction(t + 61_000).await;
    // A new batch makes the one before it cleanable.
    append(h, &name, 0, vec![encode(&[kv("e", Some("1"))])?]).await?;
    driver.apply_compaction(t + 62_000).await;
    let seen = view(read_all(h, &name, 0).await?)?;
    let keys: Vec<(i64, String)> = seen.iter().map(|r| (r.0, r.1.clone())).collect();
    ensure_eq!(
        keys,
        vec![
            (6, "a".to_owned()),
            (7, "d".to_owned()),
            (8, "c".to_owned()),
            (9, "e".to_owned()),
        ],
        "after delete.retention.ms the tombstone is gone and c=2 superseded"
    );
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, 10),
        "watermarks after the second pass"
    );
    expect_err(
        h.log.read(&name, 0, 11, 1 << 20).await,
        is_out_of_range,
        "read past the high watermark",
    )?;
    // A read from a removed offset starts at the next stored batch.
    let from_gap = view(
        h.log
            .read(&name, 0, 1, 1 << 20)
            .await
            .ctx("read from a gap")?
            .batches,
    )?;
    ensure!(
        from_gap.first().is_some_and(|r| r.0 == 6),
        "a read from offset 1 (removed) starts with the batch holding offset 6: {from_gap:?}"
    );
    Ok(())
}

/// `retention.ms` drops whole batches from the front whose newest record is too old
/// (all of them once everything expired); `retention.ms=-1` keeps everything.
pub async fn retention_by_time(h: &Harness) -> CheckResult {
    let Some(driver) = h.retention.clone() else {
        return Err(h.lacks(
            Capability::RetentionOnDemand,
            "no RetentionDriver: the backend cannot apply retention as of a chosen clock \
             (retention_in_real_time tests its own retention)",
        ));
    };
    let config = TopicConfig {
        retention_ms: 60_000,
        ..keep_forever()
    };
    let timed = h.create("time", 1, config).await?;
    let forever = h.create("time-forever", 1, keep_forever()).await?;
    let now = now_ms();
    let old = now - 600_000;
    let mixed = encode(&[
        record(old, None, Some("old")),
        record(now - 1_000, None, Some("new")),
    ])?;
    for name in [&timed, &forever] {
        append(
            h,
            name,
            0,
            vec![
                batch(2, old, "expired")?,
                mixed.clone(),
                batch(2, old - 100_000, "behind")?,
            ],
        )
        .await?;
    }
    driver.apply_retention(now).await;
    ensure_eq!(
        watermarks(h, &timed, 0).await?,
        (2, 6),
        "only the expired front batch goes; the old batch behind a recent one stays"
    );
    expect_err(
        h.log.read(&timed, 0, 0, 1 << 20).await,
        is_out_of_range,
        "read of an expired offset",
    )?;
    let read = h
        .log
        .read(&timed, 0, 2, 1 << 20)
        .await
        .ctx("read after retention")?;
    ensure_eq!(read.batches.len(), 2, "batches left after retention");
    ensure_eq!(
        watermarks(h, &forever, 0).await?,
        (0, 6),
        "retention.ms=-1 keeps everything"
    );

    driver.apply_retention(now + 3_600_000).await;
    ensure_eq!(
        watermarks(h, &timed, 0).await?,
        (6, 6),
        "everything expired"
    );
    ensure!(
        h.log
            .read(&timed, 0, 6, 1 << 20)
            .await
            .ctx("read at HW")?
            .is_empty(),
        "nothing left after everything expired"
    );
    ensure_eq!(
        append(h, &timed, 0, vec![batch(1, now_ms(), "later")?]).await?,
        6,
        "offsets continue after retention emptied the partition"
    );
    ensure_eq!(
        watermarks(h, &forever, 0).await?,
        (0, 6),
        "retention.ms=-1 keeps everything"
    );
    Ok(())
}

/// `retention.bytes` drops whole batches from the front until the partition fits (give or
/// take one batch, as backends round to their segments), but never the last batch.
pub async fn retention_by_size(h: &Harness) -> CheckResult {
    let Some(driver) = h.retention.clone() else {
        return Err(h.lacks(
            Capability::RetentionOnDemand,
            "no RetentionDriver: the backend cannot apply retention as of a chosen clock \
             (retention_in_real_time tests its own retention)",
        ));
    };
    let ts = now_ms();
    let one = sized_batch(300, ts)?;
    let size = one.len();
    let limit = 2 * size + size / 2;
    let config = TopicConfig {
        retention_bytes: i64::try_from(limit).map_err(|e| e.to_string())?,
        ..keep_forever()
    };
    let name = h.create("size", 1, config).await?;
    append(h, &name, 0, vec![one.clone(); 5]).await?;
    driver.apply_retention(ts).await;
    let (start, hw) = watermarks(h, &name, 0).await?;
    ensure_eq!(hw, 5, "high watermark after size retention");
    ensure!(
        (2..=3).contains(&start),
        "5 batches of {size} bytes with retention.bytes {limit}: expected 2 or 3 dropped, \
         log start is {start}"
    );
    let left = read_all(h, &name, start).await?;
    ensure_eq!(
        left.len() as i64,
        5 - start,
        "batches left after size retention"
    );

    let zero = TopicConfig {
        retention_bytes: 0,
        ..keep_forever()
    };
    let active = h.create("size-active", 1, zero).await?;
    append(h, &active, 0, vec![one.clone()]).await?;
    driver.apply_retention(ts).await;
    ensure_eq!(
        watermarks(h, &active, 0).await?,
        (0, 1),
        "size retention never drops the last batch"
    );
    append(h, &active, 0, vec![one.clone(), one]).await?;
    driver.apply_retention(ts).await;
    ensure_eq!(
        watermarks(h, &active, 0).await?,
        (2, 3),
        "retention.bytes=0 keeps only the last batch"
    );
    Ok(())
}

/// Records older than `retention.ms` go without anyone asking, by the backend's own
/// clock: whole batches from the front (at least the first; a backend that drops whole
/// segments keeps its newest), reads below the new log start are out of range, what is
/// left reads back intact, offsets continue, and `retention.ms=-1` keeps everything.
///
/// With an [`ExpiryDriver`] the check waits for the backend; with only a
/// [`RetentionDriver`] it applies retention as of a clock past the expiry instead.
pub async fn retention_in_real_time(h: &Harness) -> CheckResult {
    const RETENTION_MS: i64 = 1_000;
    const VALUE: usize = 256 * 1024;
    let expiring_config = TopicConfig {
        retention_ms: RETENTION_MS,
        ..keep_forever()
    };
    let (expiring, forever) = (h.name("realtime"), h.name("realtime-forever"));
    let count = match (&h.expiry, &h.retention) {
        (Some(driver), _) => {
            driver.create_topic(&expiring, expiring_config).await?;
            driver.create_topic(&forever, keep_forever()).await?;
            (driver.fill_bytes() / VALUE + 2).max(3)
        }
        (None, Some(_)) => {
            h.create("realtime", 1, expiring_config).await?;
            h.create("realtime-forever", 1, keep_forever()).await?;
            3
        }
        (None, None) => {
            return Err(h.lacks(
                Capability::RetentionInRealTime,
                "neither an ExpiryDriver nor a RetentionDriver: nothing applies retention",
            ));
        }
    };
    let value = |i: usize| -> Bytes {
        let mut v = format!("{i:08}-").into_bytes();
        v.resize(VALUE, b'r');
        Bytes::from(v)
    };
    for i in 0..count {
        let bytes = encode(&[NewRecord {
            timestamp: now_ms(),
            key: None,
            value: Some(value(i)),
            headers: vec![],
        }])?;
        for name in [&expiring, &forever] {
            append(h, name, 0, vec![bytes.clone()]).await?;
        }
    }
    let count = count as i64;
    let start = match (&h.expiry, &h.retention) {
        (Some(driver), _) => {
            let wait = Duration::from_millis(RETENTION_MS as u64) + driver.grace();
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let (start, _) = watermarks(h, &expiring, 0).await?;
                if start > 0 {
                    break start;
                }
                ensure!(
                    tokio::time::Instant::now() < deadline,
                    "nothing of {count} records of {VALUE} bytes was dropped within {wait:?} \
                     with retention.ms {RETENTION_MS}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        (None, Some(driver)) => {
            driver
                .apply_retention(now_ms() + RETENTION_MS + 1_000)
                .await;
            watermarks(h, &expiring, 0).await?.0
        }
        (None, None) => return Err("no retention driver".into()),
    };
    let (start_now, hw) = watermarks(h, &expiring, 0).await?;
    ensure_eq!(hw, count, "high watermark after retention");
    ensure!(
        (1..=count).contains(&start_now) && start_now >= start,
        "log start after retention: {start_now} (first seen {start}), expected 1..={count}"
    );
    expect_err(
        h.log.read(&expiring, 0, start_now - 1, 1 << 20).await,
        is_out_of_range,
        "read of an expired offset",
    )?;
    let left = read_all(h, &expiring, start_now).await?;
    let left: Vec<(i64, Option<Bytes>)> = left
        .iter()
        .map(records_of)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .map(|r| (r.0, r.3))
        .collect();
    let expected: Vec<(i64, Option<Bytes>)> = (start_now..count)
        .map(|o| (o, Some(value(o as usize))))
        .collect();
    ensure_eq!(left, expected, "records left after retention");
    ensure_eq!(
        append(h, &expiring, 0, vec![batch(1, now_ms(), "later")?]).await?,
        count,
        "offsets continue after retention"
    );
    ensure_eq!(
        watermarks(h, &forever, 0).await?,
        (0, count),
        "retention.ms=-1 keeps everything"
    );
    Ok(())
}

/// Eight producers appending to one partition at once get unique, contiguous offsets,
/// each producer's batches in its own order, and every batch reads back intact.
pub async fn concurrent_producers(h: &Harness) -> CheckResult {
    const PRODUCERS: usize = 8;
    const APPENDS: usize = 200;
    let name = h.create("concurrent", 1, keep_forever()).await?;
    let mut tasks = JoinSet::new();
    for producer in 0..PRODUCERS {
        let log = Arc::clone(&h.log);
        let name = name.clone();
        tasks.spawn(async move {
            let mut landed = Vec::with_capacity(APPENDS);
            for i in 0..APPENDS {
                let count = 1 + (producer + i) % 3;
                let bytes = batch(count, now_ms(), &format!("p{producer}-{i}"))?;
                let base = log
                    .append(&name, 0, valid(vec![bytes])?, now_ms())
                    .await
                    .map(|o| o.base_offset)
                    .ctx(&format!("producer {producer} append {i}"))?;
                landed.push((base, count as i64, format!("p{producer}-{i}-0")));
            }
            Ok::<_, String>(landed)
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let landed = joined.map_err(|e| format!("producer task failed: {e}"))??;
        ensure!(
            landed.windows(2).all(|w| w[0].0 < w[1].0),
            "one producer's appends must land in order"
        );
        all.extend(landed);
    }
    all.sort();
    let mut next = 0;
    for (base, count, _) in &all {
        ensure_eq!(*base, next, "offsets must be unique and contiguous");
        next += count;
    }
    ensure_eq!(
        watermarks(h, &name, 0).await?,
        (0, next),
        "HW after concurrent appends"
    );

    let batches = read_all(h, &name, 0).await?;
    ensure_eq!(batches.len(), PRODUCERS * APPENDS, "batches read back");
    for (bytes, (base, count, first_value)) in batches.iter().zip(&all) {
        let records = records_of(bytes)?;
        ensure_eq!(
            records.len() as i64,
            *count,
            "records in the batch at {base}"
        );
        ensure_eq!(
            records.first().map(|r| (r.0, r.3.clone())),
            Some((*base, Some(Bytes::from(first_value.clone())))),
            "first record of the batch at {base}"
        );
    }
    Ok(())
}

/// Appends started with [`LogStore::submit`] land in the order they were submitted, even
/// when their futures are awaited in another order or only after a plain `append` to the
/// same partition; a submit the store refuses takes no place; another partition is
/// independent.
pub async fn submitted_appends_keep_their_order(h: &Harness) -> CheckResult {
    const SUBMITS: usize = 24;
    let name = h.create("submit", 2, keep_forever()).await?;
    let mut pending = Vec::with_capacity(SUBMITS);
    let mut expected = Vec::new();
    for i in 0..SUBMITS {
        let count = 1 + i % 4;
        let bytes = batch(count, now_ms(), &format!("s{i}"))?;
        let future = h
            .log
            .submit(&name, 0, valid(vec![bytes])?, now_ms())
            .await
            .ctx(&format!("submit {i}"))?;
        pending.push((i, count as i64, future));
        expected.push((count as i64, format!("s{i}-0")));
        if i == SUBMITS / 2 {
            // Refused before it takes a place: the next submit follows the previous one.
            let too_big = sized_batch(2 << 20, now_ms())?;
            let refused = h
                .log
                .submit(&name, 0, valid(vec![too_big])?, now_ms())
                .await;
            ensure!(
                matches!(refused, Err(StoreError::MessageTooLarge { .. })),
                "a batch over max.message.bytes must be refused at submit, got {:?}",
                refused.map(|_| ())
            );
            // The other partition does not wait for this one's submits.
            let other = append(h, &name, 1, vec![batch(2, now_ms(), "other")?]).await?;
            ensure_eq!(other, 0, "first offset of the other partition");
        }
    }
    // A plain append after the submits, before any of them is awaited, lands after them.
    let tail = batch(3, now_ms(), "tail")?;
    let tail_offset = h
        .log
        .append(&name, 0, valid(vec![tail])?, now_ms())
        .await
        .ctx("append after the submits")?
        .base_offset;
    expected.push((3, "tail-0".to_string()));
    // Await newest first.
    let mut landed = Vec::with_capacity(SUBMITS);
    while let Some((i, count, future)) = pending.pop() {
        let outcome = future.await.ctx(&format!("submitted append {i}"))?;
        landed.push((i, outcome.base_offset, count));
    }
    landed.sort();
    let mut next = 0;
    for (i, base, count) in &landed {
        ensure_eq!(*base, next, "base offset of submit {i}");
        next += count;
    }
    ensure_eq!(tail_offset, next, "the append after the submits");
    let batches = read_all(h, &name, 0).await?;
    ensure_eq!(batches.len(), expected.len(), "batches read back");
    let mut offset = 0;
    for (bytes, (count, first_value)) in batches.iter().zip(&expected) {
        let records = records_of(bytes)?;
        ensure_eq!(
            records.first().map(|r| (r.0, r.3.clone())),
            Some((offset, Some(Bytes::from(first_value.clone())))),
            "first record of the batch at {offset}"
        );
        ensure_eq!(
            records.len() as i64,
            *count,
            "records in the batch at {offset}"
        );
        offset += count;
    }
    Ok(())
}

/// A task waiting on [`LogStore::watch`] wakes when another appends, with the new high
/// watermark; other partitions are not woken. Needs [`Capability::Watch`].
pub async fn long_poll_wakeup(h: &Harness) -> CheckResult {
    let name = h.create("watch", 2, keep_forever()).await?;
    // A fetch looks its topics up before it waits; a backend may watch only those.
    h.log.topic(&name).await.ctx("topic before watch")?;
    let Some(mut rx) = h.log.watch(&name, 0) else {
        return Err(h.lacks(
            Capability::Watch,
            "watch returned None for an existing partition: the backend cannot notify",
        ));
    };
    ensure!(
        h.log.watch(&name, 2).is_none(),
        "watch of an unknown partition must be None"
    );
    ensure!(
        h.log.watch(&h.name("watch-missing"), 0).is_none(),
        "watch of an unknown topic must be None"
    );
    let mut other = h.log.watch(&name, 1).ok_or("watch of partition 1")?;
    ensure_eq!(*rx.borrow_and_update(), 0, "initial high watermark");
    other.borrow_and_update();

    let waiter = tokio::spawn(async move {
        // Generous: this bounds a hang, it does not measure latency.
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .map_err(|_| "the waiter was not woken within 5 s".to_owned())?
            .map_err(|_| "the watch sender was dropped".to_owned())?;
        Ok::<_, String>(*rx.borrow_and_update())
    });
    append(h, &name, 0, vec![batch(3, now_ms(), "wake")?]).await?;
    let hw = waiter
        .await
        .map_err(|e| format!("waiter task failed: {e}"))??;
    ensure_eq!(hw, 3, "high watermark seen by the woken waiter");
    ensure_eq!(
        other
            .has_changed()
            .map_err(|_| "partition 1 sender dropped")?,
        false,
        "an append to partition 0 must not wake partition 1"
    );
    let late = h.log.watch(&name, 0).ok_or("watch after the append")?;
    ensure_eq!(
        *late.borrow(),
        3,
        "a new receiver starts at the current high watermark"
    );
    Ok(())
}

/// A record appended through another handle on the same data (a second gateway, a
/// native producer) reaches a reader that waits the way the broker's long poll does: on
/// [`LogStore::watch`] when the backend notifies every append, otherwise on the watch or
/// a re-read every [`LogStore::poll_interval`], whichever comes first. The other handle
/// is [`Harness::other_writer`]; a backend that notifies every append may do without
/// (the log itself writes), one that does not needs [`Capability::OtherWriter`].
pub async fn long_poll_sees_other_writers(h: &Harness) -> CheckResult {
    // Generous: this bounds a hang, it does not measure latency.
    const WAIT: Duration = Duration::from_secs(10);
    let notifies = h.log.notifies_every_append();
    let writer = match (&h.other_writer, notifies) {
        (Some(writer), _) => Arc::clone(writer),
        (None, true) => Arc::clone(&h.log),
        (None, false) => {
            return Err(h.lacks(
                Capability::OtherWriter,
                "the backend's notifications miss appends made elsewhere and the harness \
                 has no other writer",
            ));
        }
    };
    let name = h.create("others", 1, keep_forever()).await?;
    h.log.topic(&name).await.ctx("topic before waiting")?;
    ensure!(
        writer
            .topic(&name)
            .await
            .ctx("topic through the other writer")?
            .is_some(),
        "the other writer must see the topic"
    );
    let mut rx = h.log.watch(&name, 0);
    if notifies && rx.is_none() {
        return Err(h.lacks(
            Capability::Watch,
            "watch returned None for an existing partition: the backend cannot notify",
        ));
    }
    let interval = h.log.poll_interval();
    let log = Arc::clone(&h.log);
    let topic = name.clone();
    let reader = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut reads = 0u32;
        loop {
            let read = log
                .read(&topic, 0, 0, 1 << 20)
                .await
                .ctx("read while waiting")?;
            reads += 1;
            if !read.is_empty() {
                return Ok::<_, String>((read.batches, reads));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(format!(
                    "nothing to read {WAIT:?} after another handle appended ({reads} reads, \
                     poll interval {interval:?}, notifies every append: {notifies})"
                ));
            }
            // Like the broker: the watch alone when it sees every append, else the watch
            // or the poll interval.
            let wait = if notifies {
                deadline - now
            } else {
                interval.min(deadline - now)
            };
            match rx.as_mut() {
                Some(rx) => {
                    let _ = tokio::time::timeout(wait, rx.changed()).await;
                }
                None => tokio::time::sleep(wait).await,
            }
        }
    });
    let written = vec![
        record(now_ms(), Some("k"), Some("from-elsewhere-0")),
        record(now_ms(), None, Some("from-elsewhere-1")),
    ];
    let base = writer
        .append(&name, 0, valid(vec![encode(&written)?])?, now_ms())
        .await
        .ctx("append through the other writer")?
        .base_offset;
    ensure_eq!(base, 0, "base offset of the other writer's append");
    let (batches, _reads) = reader
        .await
        .map_err(|e| format!("reader task failed: {e}"))??;
    let records: Vec<Rec> = batches
        .iter()
        .map(records_of)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let expected: Vec<Rec> = written
        .iter()
        .enumerate()
        .map(|(i, r)| (i as i64, r.timestamp, r.key.clone(), r.value.clone()))
        .collect();
    ensure_eq!(records, expected, "records the waiting reader got");
    Ok(())
}

/// Commit and fetch one group's offsets: fetch_all sorted, overwrites, metadata and
/// epochs kept, groups isolated.
pub async fn offsets_commit_and_fetch(h: &Harness) -> CheckResult {
    let group = h.name("group");
    let other_group = h.name("group-other");
    let (t1, t2) = (h.name("t1"), h.name("t2"));
    ensure_eq!(
        h.offsets
            .fetch(&group, &t1, 0)
            .await
            .ctx("fetch before commit")?,
        None,
        "nothing committed yet"
    );
    ensure_eq!(
        h.offsets
            .fetch_all(&group)
            .await
            .ctx("fetch_all before commit")?,
        vec![],
        "nothing committed yet"
    );
    h.offsets
        .commit(
            &group,
            vec![
                (t2.clone(), 1, committed(30, None)),
                (t1.clone(), 1, committed(20, Some("meta"))),
                (t1.clone(), 0, committed(10, Some(""))),
            ],
        )
        .await
        .ctx("commit")?;
    ensure_eq!(
        h.offsets.fetch(&group, &t1, 1).await.ctx("fetch")?,
        Some(committed(20, Some("meta"))),
        "fetched offset"
    );
    ensure_eq!(
        h.offsets
            .fetch(&group, &t1, 2)
            .await
            .ctx("fetch uncommitted")?,
        None,
        "uncommitted partition"
    );
    ensure_eq!(
        h.offsets
            .fetch(&other_group, &t1, 1)
            .await
            .ctx("fetch other group")?,
        None,
        "another group's offsets"
    );
    h.offsets
        .commit(&group, vec![(t1.clone(), 0, committed(11, None))])
        .await
        .ctx("second commit")?;
    ensure_eq!(
        h.offsets.fetch_all(&group).await.ctx("fetch_all")?,
        vec![
            (t1.clone(), 0, committed(11, None)),
            (t1.clone(), 1, committed(20, Some("meta"))),
            (t2, 1, committed(30, None)),
        ],
        "fetch_all sorted by topic and partition, with the overwrite"
    );
    Ok(())
}

/// Delete some partitions' offsets, delete whole groups, list groups sorted.
pub async fn offsets_delete_and_groups(h: &Harness) -> CheckResult {
    let (a, b) = (h.name("groups-a"), h.name("groups-b"));
    let t = h.name("t");
    for group in [&b, &a] {
        h.offsets
            .commit(
                group,
                vec![
                    (t.clone(), 0, committed(1, None)),
                    (t.clone(), 1, committed(2, None)),
                ],
            )
            .await
            .ctx("commit")?;
    }
    let prefix = h.name("groups-");
    let ours = |groups: Vec<String>| -> Vec<String> {
        groups
            .into_iter()
            .filter(|g| g.starts_with(&prefix))
            .collect()
    };
    ensure_eq!(
        ours(h.offsets.groups().await.ctx("groups")?),
        vec![a.clone(), b.clone()],
        "groups sorted"
    );
    h.offsets
        .delete(&a, &[(t.clone(), 0), (h.name("never-committed"), 5)])
        .await
        .ctx("delete")?;
    ensure_eq!(
        h.offsets
            .fetch_all(&a)
            .await
            .ctx("fetch_all after delete")?,
        vec![(t.clone(), 1, committed(2, None))],
        "offsets left after delete"
    );
    ensure_eq!(
        h.offsets
            .fetch(&b, &t, 0)
            .await
            .ctx("other group after delete")?,
        Some(committed(1, None)),
        "delete touches one group only"
    );
    h.offsets.delete_group(&b).await.ctx("delete_group")?;
    ensure_eq!(
        h.offsets
            .fetch_all(&b)
            .await
            .ctx("fetch_all of a deleted group")?,
        vec![],
        "a deleted group has no offsets"
    );
    ensure_eq!(
        ours(h.offsets.groups().await.ctx("groups after delete_group")?),
        vec![a.clone()],
        "groups after delete_group"
    );
    h.offsets
        .delete_group(&h.name("groups-missing"))
        .await
        .ctx("delete_group of an unknown group")?;
    Ok(())
}

/// Three names under `tag`: the first, a second in the same coordinator shard, and one in
/// another shard.
fn three_names(h: &Harness, tag: &str) -> Result<(String, String, String), CheckError> {
    use crate::cluster::group_shard;
    let a = h.name(&format!("{tag}-a"));
    let shard = group_shard(&a);
    let same = (0..)
        .map(|i| h.name(&format!("{tag}-same-{i}")))
        .find(|g| group_shard(g) == shard)
        .ok_or_else(|| CheckError::Failed("no name in the same shard".into()))?;
    let other = (0..)
        .map(|i| h.name(&format!("{tag}-other-{i}")))
        .find(|g| group_shard(g) != shard)
        .ok_or_else(|| CheckError::Failed("no name in another shard".into()))?;
    Ok((a, same, other))
}

/// Group states: stored per group, listed by coordinator shard (sorted by group), last
/// write wins, `None` deletes; `acquire_shard` keeps what was stored.
pub async fn group_states_by_shard(h: &Harness) -> CheckResult {
    use crate::cluster::group_shard;
    let (a, same, other) = three_names(h, "gs")?;
    let shard = group_shard(&a);
    let ours = |states: Vec<(String, Bytes)>| -> Vec<(String, Bytes)> {
        states
            .into_iter()
            .filter(|(g, _)| g == &a || g == &same || g == &other)
            .collect()
    };
    h.offsets.acquire_shard(shard).await.ctx("acquire_shard")?;
    for (g, v) in [(&a, "a1"), (&same, "s1"), (&other, "o1"), (&a, "a2")] {
        h.offsets
            .put_group_state(g, Some(Bytes::from(v)))
            .await
            .ctx(&format!("put_group_state {g}"))?;
    }
    let mut expected = vec![
        (a.clone(), Bytes::from("a2")),
        (same.clone(), Bytes::from("s1")),
    ];
    expected.sort();
    ensure_eq!(
        ours(h.offsets.group_states(shard).await.ctx("group_states")?),
        expected,
        "states of the shard, last write wins"
    );
    ensure_eq!(
        ours(
            h.offsets
                .group_states(group_shard(&other))
                .await
                .ctx("group_states of the other shard")?
        ),
        vec![(other.clone(), Bytes::from("o1"))],
        "the other shard"
    );
    h.offsets
        .put_group_state(&a, None)
        .await
        .ctx("delete a group state")?;
    h.offsets.release_shard(shard).await;
    h.offsets.acquire_shard(shard).await.ctx("acquire again")?;
    ensure_eq!(
        ours(
            h.offsets
                .group_states(shard)
                .await
                .ctx("group_states after delete")?
        ),
        vec![(same.clone(), Bytes::from("s1"))],
        "a deleted state is gone, the other kept across release and acquire"
    );
    Ok(())
}

/// The transactional flag: unset on a new topic, set by `mark_transactional` (again: no
/// change), kept when the topic's settings are replaced or partitions added, per topic,
/// and gone with the topic.
pub async fn transactional_flag_is_sticky(h: &Harness) -> CheckResult {
    let name = h.create("txn-flag", 1, keep_forever()).await?;
    let other = h.create("txn-flag-other", 1, keep_forever()).await?;
    ensure_eq!(
        h.log
            .is_transactional(&name)
            .await
            .ctx("is_transactional")?,
        false,
        "a new topic is not transactional"
    );
    h.log
        .mark_transactional(&name)
        .await
        .ctx("mark_transactional")?;
    h.log
        .mark_transactional(&name)
        .await
        .ctx("mark_transactional again")?;
    ensure_eq!(
        h.log
            .is_transactional(&name)
            .await
            .ctx("is_transactional")?,
        true,
        "marked"
    );
    h.log
        .set_topic_config(
            &name,
            TopicConfig {
                retention_ms: 3_600_000,
                ..keep_forever()
            },
        )
        .await
        .ctx("set_topic_config")?;
    h.log
        .create_partitions(&name, 2, false)
        .await
        .ctx("create_partitions")?;
    ensure_eq!(
        h.log
            .is_transactional(&name)
            .await
            .ctx("is_transactional after the rewrites")?,
        true,
        "the flag survives new settings and partitions"
    );
    ensure_eq!(
        h.log
            .topic(&name)
            .await
            .ctx("topic")?
            .map(|t| (t.partitions, t.config.retention_ms)),
        Some((2, 3_600_000)),
        "the rewrites themselves"
    );
    ensure_eq!(
        h.log
            .is_transactional(&other)
            .await
            .ctx("is_transactional of another topic")?,
        false,
        "the flag is per topic"
    );
    h.log.delete_topic(&name).await.ctx("delete_topic")?;
    let again = h.create("txn-flag", 1, keep_forever()).await?;
    ensure_eq!(
        h.log
            .is_transactional(&again)
            .await
            .ctx("is_transactional of the recreated topic")?,
        false,
        "a recreated topic starts unflagged"
    );
    Ok(())
}

/// Transaction states: stored per transactional id, listed by its shard
/// ([`crate::cluster::group_shard`], sorted by id), last write wins, `None` deletes, kept
/// across `release_shard` and `acquire_shard`.
pub async fn txn_states_by_shard(h: &Harness) -> CheckResult {
    use crate::cluster::group_shard;
    let (a, same, other) = three_names(h, "ts")?;
    let shard = group_shard(&a);
    let ours = |states: Vec<(String, Bytes)>| -> Vec<(String, Bytes)> {
        states
            .into_iter()
            .filter(|(id, _)| id == &a || id == &same || id == &other)
            .collect()
    };
    h.offsets.acquire_shard(shard).await.ctx("acquire_shard")?;
    h.offsets
        .acquire_shard(group_shard(&other))
        .await
        .ctx("acquire the other shard")?;
    for (id, v) in [(&a, "a1"), (&same, "s1"), (&other, "o1"), (&a, "a2")] {
        h.offsets
            .put_txn_state(id, Some(Bytes::from(v)))
            .await
            .ctx(&format!("put_txn_state {id}"))?;
    }
    // A group of the same name is another thing.
    h.offsets
        .put_group_state(&same, Some(Bytes::from("group")))
        .await
        .ctx("put_group_state")?;
    let mut expected = vec![
        (a.clone(), Bytes::from("a2")),
        (same.clone(), Bytes::from("s1")),
    ];
    expected.sort();
    ensure_eq!(
        ours(h.offsets.txn_states(shard).await.ctx("txn_states")?),
        expected,
        "states of the shard, last write wins"
    );
    ensure_eq!(
        ours(
            h.offsets
                .txn_states(group_shard(&other))
                .await
                .ctx("txn_states of the other shard")?
        ),
        vec![(other.clone(), Bytes::from("o1"))],
        "the other shard"
    );
    h.offsets
        .put_txn_state(&a, None)
        .await
        .ctx("delete a txn state")?;
    h.offsets.release_shard(shard).await;
    h.offsets.acquire_shard(shard).await.ctx("acquire again")?;
    ensure_eq!(
        ours(
            h.offsets
                .txn_states(shard)
                .await
                .ctx("txn_states after delete")?
        ),
        vec![(same.clone(), Bytes::from("s1"))],
        "a deleted state is gone, the other kept across release and acquire"
    );
    ensure_eq!(
        h.offsets
            .group_states(shard)
            .await
            .ctx("group_states")?
            .into_iter()
            .filter(|(g, _)| g == &same)
            .collect::<Vec<_>>(),
        vec![(same.clone(), Bytes::from("group"))],
        "group states and txn states do not mix"
    );
    h.offsets
        .put_group_state(&same, None)
        .await
        .ctx("delete the group state")?;
    Ok(())
}

/// Coordinator epochs: every claim on a shard is above every earlier claim on it, also
/// across `release_shard` and `acquire_shard`; shards count apart.
pub async fn txn_epochs_increase(h: &Harness) -> CheckResult {
    use crate::cluster::group_shard;
    let shard = group_shard(&h.name("epochs"));
    let other = (shard + 1) % crate::cluster::GROUP_SHARDS;
    h.offsets.acquire_shard(shard).await.ctx("acquire_shard")?;
    h.offsets
        .acquire_shard(other)
        .await
        .ctx("acquire the other shard")?;
    let mut last = h
        .offsets
        .claim_txn_epoch(shard)
        .await
        .ctx("claim_txn_epoch")?;
    ensure!(last >= 0, "epochs are not negative: {last}");
    for round in 0..5 {
        if round == 2 {
            h.offsets.release_shard(shard).await;
            h.offsets.acquire_shard(shard).await.ctx("acquire again")?;
        }
        // Claims on another shard do not hold this one back or skip it ahead.
        h.offsets
            .claim_txn_epoch(other)
            .await
            .ctx("claim on the other shard")?;
        let next = h
            .offsets
            .claim_txn_epoch(shard)
            .await
            .ctx("claim_txn_epoch")?;
        ensure!(
            next > last,
            "claim {round}: epoch {next} is not above the previous {last}"
        );
        last = next;
    }
    Ok(())
}

fn ours_pending(all: Vec<PendingOffsets>, groups: &[&String]) -> Vec<PendingOffsets> {
    let mut out: Vec<PendingOffsets> = all
        .into_iter()
        .filter(|p| groups.contains(&&p.group))
        .map(|mut p| {
            p.offsets.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            p
        })
        .collect();
    out.sort_by(|a, b| (&a.group, a.producer_id).cmp(&(&b.group, b.producer_id)));
    out
}

/// Pending transactional offsets: invisible to `fetch` while pending, listed by the
/// group's shard, replaced by a second put; a commit makes them the group's committed
/// offsets and an abort drops them (the earlier committed offsets stay); completing with
/// nothing pending changes nothing; kept across `release_shard` and `acquire_shard`.
pub async fn pending_offsets_commit_or_abort(h: &Harness) -> CheckResult {
    use crate::cluster::group_shard;
    let group = h.name("pending");
    let shard = group_shard(&group);
    let t = h.name("t");
    let (p1, p2) = (1_000_001i64, 1_000_002i64);
    h.offsets.acquire_shard(shard).await.ctx("acquire_shard")?;
    h.offsets
        .commit(&group, vec![(t.clone(), 0, committed(5, None))])
        .await
        .ctx("commit")?;
    h.offsets
        .put_pending_offsets(&group, p1, vec![(t.clone(), 0, committed(7, None))])
        .await
        .ctx("put_pending_offsets p1")?;
    h.offsets
        .put_pending_offsets(
            &group,
            p1,
            vec![
                (t.clone(), 1, committed(21, Some("m"))),
                (t.clone(), 0, committed(8, None)),
            ],
        )
        .await
        .ctx("put_pending_offsets p1 again")?;
    h.offsets
        .put_pending_offsets(&group, p2, vec![(t.clone(), 0, committed(99, None))])
        .await
        .ctx("put_pending_offsets p2")?;
    ensure_eq!(
        h.offsets.fetch_all(&group).await.ctx("fetch_all")?,
        vec![(t.clone(), 0, committed(5, None))],
        "pending offsets are not committed"
    );
    h.offsets.release_shard(shard).await;
    h.offsets.acquire_shard(shard).await.ctx("acquire again")?;
    let p1_set = PendingOffsets {
        group: group.clone(),
        producer_id: p1,
        offsets: vec![
            (t.clone(), 0, committed(8, None)),
            (t.clone(), 1, committed(21, Some("m"))),
        ],
    };
    let p2_set = PendingOffsets {
        group: group.clone(),
        producer_id: p2,
        offsets: vec![(t.clone(), 0, committed(99, None))],
    };
    ensure_eq!(
        ours_pending(
            h.offsets
                .pending_offsets(shard)
                .await
                .ctx("pending_offsets")?,
            &[&group]
        ),
        vec![p1_set.clone(), p2_set.clone()],
        "both producers' sets, the second put replacing the first"
    );
    h.offsets
        .complete_pending_offsets(&group, p2, false)
        .await
        .ctx("abort p2")?;
    ensure_eq!(
        h.offsets
            .fetch_all(&group)
            .await
            .ctx("fetch_all after abort")?,
        vec![(t.clone(), 0, committed(5, None))],
        "an abort commits nothing"
    );
    ensure_eq!(
        ours_pending(
            h.offsets
                .pending_offsets(shard)
                .await
                .ctx("pending_offsets after abort")?,
            &[&group]
        ),
        vec![p1_set],
        "the aborted set is gone"
    );
    h.offsets
        .complete_pending_offsets(&group, p1, true)
        .await
        .ctx("commit p1")?;
    ensure_eq!(
        h.offsets
            .fetch_all(&group)
            .await
            .ctx("fetch_all after commit")?,
        vec![
            (t.clone(), 0, committed(8, None)),
            (t.clone(), 1, committed(21, Some("m"))),
        ],
        "a commit makes the pending offsets committed"
    );
    ensure_eq!(
        ours_pending(
            h.offsets
                .pending_offsets(shard)
                .await
                .ctx("pending_offsets after commit")?,
            &[&group]
        ),
        vec![],
        "nothing pending after the commit"
    );
    // Retried completions find nothing and change nothing.
    h.offsets
        .complete_pending_offsets(&group, p1, true)
        .await
        .ctx("commit p1 again")?;
    h.offsets
        .complete_pending_offsets(&group, p2, true)
        .await
        .ctx("commit p2 after its abort")?;
    ensure_eq!(
        h.offsets
            .fetch_all(&group)
            .await
            .ctx("fetch_all after the retries")?,
        vec![
            (t.clone(), 0, committed(8, None)),
            (t, 1, committed(21, Some("m"))),
        ],
        "retried completions"
    );
    Ok(())
}

/// Completing a pending set is one step: a reader that sees its offsets committed never
/// sees the set still pending afterwards, and one that sees it gone sees the offsets.
pub async fn pending_offsets_complete_atomically(h: &Harness) -> CheckResult {
    use crate::cluster::group_shard;
    let group = h.name("pending-atomic");
    let shard = group_shard(&group);
    let t = h.name("t");
    let pid = 2_000_001i64;
    h.offsets.acquire_shard(shard).await.ctx("acquire_shard")?;
    let rounds = 200i64;
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let offsets = Arc::clone(&h.offsets);
        let (group, t) = (group.clone(), t.clone());
        let progress = Arc::clone(&progress);
        tokio::spawn(async move {
            let mut checks = 0u64;
            loop {
                let seen = offsets
                    .fetch(&group, &t, 0)
                    .await
                    .map_err(|e| format!("fetch: {e}"))?
                    .map_or(-1, |c| c.offset);
                let pending: Vec<i64> = offsets
                    .pending_offsets(shard)
                    .await
                    .map_err(|e| format!("pending_offsets: {e}"))?
                    .into_iter()
                    .filter(|p| p.group == group)
                    .flat_map(|p| p.offsets.into_iter().map(|o| o.2.offset))
                    .collect();
                checks += 1;
                progress.store(checks, std::sync::atomic::Ordering::Release);
                // Round r puts offset r pending, then commits it: once r is committed,
                // round r's pending set must be gone.
                if pending.contains(&seen) {
                    return Err(format!(
                        "offset {seen} read as committed, then still pending"
                    ));
                }
                if seen == rounds - 1 {
                    return Ok(checks);
                }
                tokio::task::yield_now().await;
            }
        })
    };
    // The writer lets the reader take a look between its steps (the reader runs on
    // another thread meanwhile, so it also looks while a completion is under way).
    let reader_moves = || async {
        let from = progress.load(std::sync::atomic::Ordering::Acquire);
        for _ in 0..10_000 {
            if progress.load(std::sync::atomic::Ordering::Acquire) > from || reader.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    for r in 0..rounds {
        h.offsets
            .put_pending_offsets(&group, pid, vec![(t.clone(), 0, committed(r, None))])
            .await
            .ctx("put_pending_offsets")?;
        reader_moves().await;
        h.offsets
            .complete_pending_offsets(&group, pid, true)
            .await
            .ctx("complete_pending_offsets")?;
        reader_moves().await;
    }
    let checks = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .map_err(|_| "the reader never saw the last commit".to_owned())?
        .map_err(|e| format!("reader task: {e}"))??;
    ensure!(checks > 0, "the reader checked nothing");
    ensure_eq!(
        h.offsets.fetch(&group, &t, 0).await.ctx("fetch")?,
        Some(committed(rounds - 1, None)),
        "the last round's offset"
    );
    Ok(())
}
