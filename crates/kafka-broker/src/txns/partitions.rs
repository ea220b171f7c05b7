//! The partition side of transactions, for the partitions this gateway leads.
//!
//! Per led partition the gateway keeps a [`TxnIndex`] (which producers have a
//! transaction open and from which offset, which transactions were aborted, the last
//! marker of each producer), folded over the partition's batches in offset order. From it
//! come the last stable offset (LSO) a `read_committed` consumer may read up to, and the
//! aborted transactions a Fetch response lists.
//!
//! ## Appends and the LSO
//!
//! A transactional batch is idempotent: the produce handler checks it and hands it to the
//! store under its producer's lock on the partition, and holds the partition's own lock
//! shared until the store confirmed it (see [`crate::producers`]). So a producer's
//! batches are begun ([`TxnPartitions::begin_append`]) in offset order, several
//! producers' appends (and one producer's pipelined ones) are in flight at once, and a
//! marker, a recovery or a rebuild, which take the partition's lock exclusively, see none
//! in flight. A batch that opens a transaction is counted before it is handed to the
//! store: [`TxnPartitions::begin_append`] records a *pending* lower bound for the
//! producer (every offset the append can land at is at or above it), and
//! [`TxnPartitions::appended`] replaces it with the real first offset once that batch
//! is confirmed, whatever order the producer's later batches are confirmed in. The LSO
//! is the smallest of the high watermark, the first offset of every open transaction
//! and every pending bound, so a consumer never sees data that is already in the store
//! but not yet counted as part of an open transaction. An append whose outcome is
//! unknown (error, timeout) keeps its bound and marks the partition for a new recovery:
//! only the log can tell whether it landed.
//!
//! ## Verification (KIP-890 part 1)
//!
//! The first transactional batch of a producer in a partition where it has nothing open
//! is checked with the transaction coordinator before it is appended (the produce
//! handler does that with no lock held). A positive answer leaves a [`Guard`] for the
//! producer in the partition; [`TxnPartitions::begin_append`] opens the transaction only
//! with the guard it was given, and a marker clears it, so a verification answered before
//! the transaction ended cannot open a new one after it.
//!
//! ## Recovery
//!
//! The index is rebuilt from the log the first time it is needed after this gateway
//! starts leading the partition (same view tracking as the producer state: a view right
//! after the last one seen keeps the partitions still led, anything else forgets them).
//! A topic that never held a transactional batch (the store's sticky flag) gets an empty
//! index at its high watermark; otherwise the batch headers from the log start to the
//! high watermark are read (control batches: their first record), at most
//! `txn_index_rebuild_max_bytes` bytes: past that the partition answers
//! `NOT_LEADER_OR_FOLLOWER` and one warning is logged. Recoveries run under the
//! partition's producer lock, so no append or marker interleaves.
//!
//! ## Markers
//!
//! [`TxnPartitions::write_marker`] appends a commit or abort marker for a producer: a
//! coordinator epoch below the last one seen for the producer is
//! `TRANSACTION_COORDINATOR_FENCED`, a producer epoch below the producer's current one
//! `INVALID_PRODUCER_EPOCH`, and a producer with nothing open gets `NONE` without a write
//! (a retried marker, or a partition added to a transaction but never written). A marker
//! raises the producer's epoch in the producer state, so a fenced producer's later
//! batches are refused.
//!
//! ## Bounds
//!
//! At most [`TxnPartitionLimits::max_partitions`] partition indexes are held; past it the
//! least recently used one with no append in flight is dropped (it is rebuilt from the
//! log when needed again). Verification guards are capped at
//! [`TxnPartitionLimits::max_guards`] over all partitions; the oldest go first (their
//! producer's next batch is verified again or refused as not in a transaction).

use crate::broker::Broker;
use crate::cluster::{Route, leader};
use crate::producers::Readiness;
use crate::txns::MarkerWrite;
use kafka_protocol::ErrorCode;
use kafka_records::{BATCH_HEADER_LEN, BatchHeader, DecodeLimits, RecordBatch};
use kafka_store::LogStore;
use kafka_store::cluster::Membership;
use kafka_store::txn_index::{AbortedTxn, BatchSummary, Marker, TxnIndex, marker_batch};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::warn;

/// Bytes asked of the store per read while rebuilding an index.
const SCAN_WINDOW: usize = 1 << 20;
/// Longest wait for the store to confirm a marker.
const MARKER_APPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of the partition side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxnPartitionLimits {
    /// Most bytes read to rebuild one partition's index (`txn_index_rebuild_max_bytes`).
    pub(crate) rebuild_max_bytes: usize,
    /// Most partition indexes held at once.
    pub(crate) max_partitions: usize,
    /// Most verification guards held at once, over all partitions.
    pub(crate) max_guards: usize,
    /// Most topics remembered as already flagged transactional in the store.
    pub(crate) max_flagged_topics: usize,
}

impl TxnPartitionLimits {
    /// The bounds set in `settings`.
    pub(crate) fn of(settings: &crate::config::TransactionSettings) -> Self {
        TxnPartitionLimits {
            rebuild_max_bytes: settings.txn_index_rebuild_max_bytes,
            max_partitions: settings.txn_index_max_partitions,
            max_guards: settings.txn_max_verification_guards,
            max_flagged_topics: settings.txn_max_flagged_topics,
        }
    }

    /// The default bounds with the given rebuild bound.
    #[cfg(test)]
    pub(crate) fn new(rebuild_max_bytes: usize) -> Self {
        TxnPartitionLimits {
            rebuild_max_bytes,
            ..TxnPartitionLimits::of(&crate::config::TransactionSettings::default())
        }
    }
}

/// A positive verification of one producer in one partition, handed back to
/// [`TxnPartitions::begin_append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Guard(pub(crate) u64);

/// Counters read by the metrics endpoint.
#[derive(Debug, Default)]
pub(crate) struct TxnPartitionStats {
    /// Partition indexes rebuilt.
    pub(crate) rebuilds: AtomicU64,
    /// Bytes read by rebuilds (`kafka_gateway_txn_index_rebuild_bytes_total`).
    pub(crate) rebuild_bytes: AtomicU64,
    /// Rebuilds that failed.
    pub(crate) rebuild_failures: AtomicU64,
    /// Markers appended.
    pub(crate) markers: AtomicU64,
}

/// One led partition.
#[derive(Debug)]
struct Part {
    index: TxnIndex,
    /// One past the highest offset known to be taken (transactional or not).
    end: i64,
    /// Per producer opening a transaction: a lower bound of its first offset.
    pending: HashMap<i64, i64>,
    /// Whether the index must be rebuilt before it is used again.
    stale: bool,
    last_used: u64,
}

impl Part {
    fn fresh(index: TxnIndex, tick: u64) -> Part {
        let end = index.end();
        Part {
            index,
            end,
            pending: HashMap::new(),
            stale: false,
            last_used: tick,
        }
    }

    fn open(&self, producer_id: i64) -> bool {
        self.index.open_txn(producer_id).is_some() || self.pending.contains_key(&producer_id)
    }

    fn lso(&self, high_watermark: i64) -> i64 {
        let mut lso = high_watermark;
        if let Some(first) = self.index.first_unstable() {
            lso = lso.min(first);
        }
        if let Some(first) = self.pending.values().min() {
            lso = lso.min(*first);
        }
        lso
    }
}

type Key = (String, i32);

#[derive(Debug, Default)]
struct State {
    parts: HashMap<Key, Part>,
    /// Verification guards by (topic, partition, producer): (guard, when set).
    guards: HashMap<(String, i32, i64), (u64, u64)>,
    /// The version of the last view seen (0: none yet).
    version: u64,
    /// Topics already flagged transactional in the store.
    flagged: HashSet<String>,
    tick: u64,
}

impl State {
    /// Brings the held partitions up to `route`'s view (see the module docs).
    fn observe(&mut self, route: &Route) {
        let version = route.view.version;
        let keep_led = route.owner && version == self.version.wrapping_add(1);
        if keep_led {
            let led = |t: &str, p: i32| leader(&route.view, t, p) == Some(route.me);
            self.parts.retain(|(t, p), _| led(t, *p));
            self.guards.retain(|(t, p, _), _| led(t, *p));
        } else if !route.owner || version != self.version {
            self.parts.clear();
            self.guards.clear();
        }
        self.version = version;
    }

    fn next_tick(&mut self) -> u64 {
        self.tick = self.tick.wrapping_add(1);
        self.tick
    }
}

/// A transactional batch handed to the store (after [`TxnPartitions::begin_append`]),
/// until its outcome is folded in. Dropped unsettled (its request went away with the
/// append in flight) it counts as an unknown outcome: the partition's index is rebuilt
/// from the log before it is used again, so a transaction whose first batch was never
/// folded in is not opened at a later batch's offset.
pub(crate) struct TxnTicket<'a> {
    parts: &'a TxnPartitions,
    topic: String,
    partition: i32,
    /// The batch opened its producer's transaction.
    opens: bool,
    settled: bool,
}

impl<'a> TxnTicket<'a> {
    /// A ticket for a batch `begin_append` accepted (`opens`: its answer).
    pub(crate) fn new(
        parts: &'a TxnPartitions,
        topic: &str,
        partition: i32,
        opens: bool,
    ) -> TxnTicket<'a> {
        TxnTicket {
            parts,
            topic: topic.to_owned(),
            partition,
            opens,
            settled: false,
        }
    }

    /// The store confirmed the batch: [`TxnPartitions::appended`].
    pub(crate) fn landed(mut self, batch: &BatchSummary) {
        self.settled = true;
        self.parts
            .appended(&self.topic, self.partition, batch, self.opens);
    }
}

impl Drop for TxnTicket<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.parts.append_unknown(&self.topic, self.partition);
        }
    }
}

/// Per led partition: its transaction index and what is being appended.
#[derive(Debug)]
pub(crate) struct TxnPartitions {
    limits: TxnPartitionLimits,
    state: Mutex<State>,
    next_guard: AtomicU64,
    /// Counters.
    pub(crate) stats: TxnPartitionStats,
}

impl TxnPartitions {
    pub(crate) fn with_limits(limits: TxnPartitionLimits) -> Self {
        TxnPartitions {
            limits: TxnPartitionLimits {
                max_partitions: limits.max_partitions.max(1),
                ..limits
            },
            state: Mutex::new(State::default()),
            next_guard: AtomicU64::new(1),
            stats: TxnPartitionStats::default(),
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        self.state.lock().ok().map(|mut s| f(&mut s))
    }

    fn readiness(
        &self,
        membership: &dyn Membership,
        topic: &str,
        partition: i32,
    ) -> Result<Readiness, ErrorCode> {
        let route = Route::of(membership);
        self.with_state(|s| {
            s.observe(&route);
            if !route.leads(topic, partition) {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            }
            match s.parts.get(&(topic.to_string(), partition)) {
                Some(p) if !p.stale => Ok(Readiness::Ready),
                _ => Ok(Readiness::Recover(route.view.version)),
            }
        })
        .unwrap_or(Err(ErrorCode::UNKNOWN_SERVER_ERROR))
    }

    /// Whether `topic`'s `partition` index is current (led and rebuilt since).
    pub(crate) fn is_ready(
        &self,
        membership: &dyn Membership,
        topic: &str,
        partition: i32,
    ) -> bool {
        self.readiness(membership, topic, partition) == Ok(Readiness::Ready)
    }

    /// Makes `topic`'s `partition` index current: confirms this gateway leads it and
    /// rebuilds the index from the log when needed. The caller holds the partition's
    /// producer lock. Every failure is `NOT_LEADER_OR_FOLLOWER` (retriable, nothing
    /// written).
    pub(crate) async fn ensure_recovered(
        &self,
        log: &dyn LogStore,
        membership: &dyn Membership,
        topic: &str,
        partition: i32,
    ) -> Result<(), ErrorCode> {
        let version = match self.readiness(membership, topic, partition)? {
            Readiness::Ready => return Ok(()),
            Readiness::Recover(version) => version,
        };
        let index = match self.rebuild(log, topic, partition).await {
            Ok(index) => index,
            Err(why) => {
                self.stats.rebuild_failures.fetch_add(1, Ordering::Relaxed);
                warn!(topic, partition, why = %why, "transaction index not rebuilt");
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            }
        };
        self.stats.rebuilds.fetch_add(1, Ordering::Relaxed);
        let max = self.limits.max_partitions;
        self.with_state(|s| {
            if s.version != version {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            }
            let key = (topic.to_string(), partition);
            if !s.parts.contains_key(&key) && s.parts.len() >= max {
                // The least recently used partition with nothing in flight goes; it is
                // rebuilt from the log when needed again.
                let victim = s
                    .parts
                    .iter()
                    .filter(|(_, p)| p.pending.is_empty())
                    .min_by_key(|(_, p)| p.last_used)
                    .map(|(k, _)| k.clone());
                match victim {
                    Some(v) => {
                        s.parts.remove(&v);
                    }
                    None => return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
                }
            }
            let tick = s.next_tick();
            s.parts.insert(key, Part::fresh(index, tick));
            Ok(())
        })
        .unwrap_or(Err(ErrorCode::UNKNOWN_SERVER_ERROR))
    }

    /// [`TxnPartitions::ensure_recovered`] taking the partition's producer lock when a
    /// rebuild is needed (for readers: Fetch, ListOffsets).
    pub(crate) async fn ensure_ready(
        &self,
        broker: &Broker,
        topic: &str,
        partition: i32,
    ) -> Result<(), ErrorCode> {
        if self.readiness(broker.membership.as_ref(), topic, partition)? == Readiness::Ready {
            return Ok(());
        }
        let stripe = broker.producers.stripe(topic, partition);
        let _guard = broker.producers.lock(vec![stripe]).await;
        self.ensure_recovered(
            broker.stores.log.as_ref(),
            broker.membership.as_ref(),
            topic,
            partition,
        )
        .await
    }

    /// Reads the partition's batch headers into a fresh index.
    async fn rebuild(
        &self,
        log: &dyn LogStore,
        topic: &str,
        partition: i32,
    ) -> Result<TxnIndex, String> {
        let w = log
            .watermarks(topic, partition)
            .await
            .map_err(|e| e.to_string())?;
        let transactional = log
            .is_transactional(topic)
            .await
            .map_err(|e| e.to_string())?;
        if !transactional {
            return Ok(TxnIndex::new(w.high_watermark));
        }
        let mut index = TxnIndex::new(w.log_start_offset);
        let mut at = w.log_start_offset;
        let mut bytes = 0usize;
        let limits = DecodeLimits::default();
        while at < w.high_watermark {
            let left = self.limits.rebuild_max_bytes.saturating_sub(bytes).max(1);
            let read = match log.read(topic, partition, at, left.min(SCAN_WINDOW)).await {
                Ok(r) => r,
                Err(kafka_store::StoreError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if log_start_offset > at => {
                    at = log_start_offset;
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            };
            if read.batches.is_empty() {
                break;
            }
            let before = at;
            for raw in &read.batches {
                bytes = bytes.saturating_add(raw.len());
                if bytes > self.limits.rebuild_max_bytes {
                    return Err(format!(
                        "the log holds more than txn_index_rebuild_max_bytes ({})",
                        self.limits.rebuild_max_bytes
                    ));
                }
                let h = BatchHeader::parse(raw.get(..BATCH_HEADER_LEN).unwrap_or_default())
                    .map_err(|e| e.to_string())?;
                if h.base_offset >= w.high_watermark {
                    break;
                }
                at = at.max(h.next_offset());
                if h.next_offset() <= index.end() {
                    // Already folded (a read may start inside a batch).
                    continue;
                }
                let summary = if h.attributes.is_control() || h.attributes.is_transactional() {
                    let batch = RecordBatch::decode(raw, &limits).map_err(|e| e.to_string())?;
                    BatchSummary::of(&batch).map_err(|e| e.to_string())?
                } else {
                    BatchSummary {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        producer_id: h.producer_id,
                        producer_epoch: h.producer_epoch,
                        transactional: false,
                        marker: None,
                    }
                };
                index.observe(&summary);
            }
            if at <= before {
                return Err("the store's batches do not move forward".into());
            }
        }
        self.stats
            .rebuild_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(index)
    }

    /// Whether a transactional batch of `producer_id` must be verified with its
    /// coordinator first: it has nothing open in the partition (as far as this gateway
    /// knows now; [`TxnPartitions::begin_append`] decides under the lock).
    pub(crate) fn needs_verification(&self, topic: &str, partition: i32, producer_id: i64) -> bool {
        self.with_state(|s| {
            s.parts
                .get(&(topic.to_string(), partition))
                .is_none_or(|p| p.stale || !p.open(producer_id))
        })
        .unwrap_or(true)
    }

    /// Records a positive verification of `producer_id` in the partition. Verifications
    /// until the transaction ends share one guard (as Kafka's verification entry is
    /// created only if absent): the same batch verified on two connections, or two
    /// batches verified before either is appended, may each open the transaction. A
    /// marker, written or found with nothing to write, removes the guard, so a
    /// verification answered before the transaction ended opens nothing after it.
    pub(crate) fn set_guard(&self, topic: &str, partition: i32, producer_id: i64) -> Guard {
        let max = self.limits.max_guards.max(1);
        self.with_state(|s| {
            let key = (topic.to_string(), partition, producer_id);
            let tick = s.next_tick();
            if let Some((guard, _)) = s.guards.get(&key) {
                let guard = *guard;
                s.guards.insert(key, (guard, tick));
                return Guard(guard);
            }
            if s.guards.len() >= max {
                // The oldest hundredth goes.
                let mut ages: Vec<u64> = s.guards.values().map(|(_, t)| *t).collect();
                let cut = (max / 100).max(1).min(ages.len()) - 1;
                let (_, cutoff, _) = ages.select_nth_unstable(cut);
                let cutoff = *cutoff;
                s.guards.retain(|_, (_, t)| *t > cutoff);
            }
            let guard = self.next_guard.fetch_add(1, Ordering::Relaxed);
            s.guards.insert(key, (guard, tick));
            Guard(guard)
        })
        .unwrap_or(Guard(0))
    }

    /// Checks a transactional batch of `producer_id` at `producer_epoch` before it is
    /// handed to the store, under the partition's producer lock after
    /// [`TxnPartitions::ensure_recovered`]: an epoch below the producer's last marker is
    /// `INVALID_PRODUCER_EPOCH`; a batch that opens a transaction needs the `guard` of a
    /// verification still current, else `INVALID_TXN_STATE` (the caller answers
    /// `TRANSACTION_ABORTABLE` from Produce v11). A batch that opens one is counted as
    /// pending from here, and `Ok(true)` says so: [`TxnPartitions::appended`] needs to
    /// know which batch opened the transaction.
    pub(crate) fn begin_append(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        guard: Option<Guard>,
    ) -> Result<bool, ErrorCode> {
        self.with_state(|s| {
            let tick = s.next_tick();
            let key = (topic.to_string(), partition);
            let gkey = (topic.to_string(), partition, producer_id);
            let current = s.guards.get(&gkey).map(|(g, _)| Guard(*g));
            let Some(part) = s.parts.get_mut(&key).filter(|p| !p.stale) else {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            };
            part.last_used = tick;
            if part
                .index
                .last_marker(producer_id)
                .is_some_and(|(epoch, _)| producer_epoch < epoch)
            {
                return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
            }
            if part.open(producer_id) {
                return Ok(false);
            }
            if guard.is_none() || guard != current {
                return Err(ErrorCode::INVALID_TXN_STATE);
            }
            let bound = part.end.max(part.index.end());
            part.pending.insert(producer_id, bound);
            Ok(true)
        })
        .unwrap_or(Err(ErrorCode::UNKNOWN_SERVER_ERROR))
    }

    /// Folds in a batch the store confirmed; `opens` says whether it is the batch that
    /// opened its producer's transaction ([`TxnPartitions::begin_append`]'s answer).
    /// Non-transactional batches only move the partition's end. A producer's batches
    /// may be confirmed out of order: a later batch of a transaction confirmed before the
    /// one that opened it leaves the pending bound in place (the opener lands below it,
    /// and may already be readable in the store), and the opener opens the transaction
    /// at its own offset.
    pub(crate) fn appended(&self, topic: &str, partition: i32, batch: &BatchSummary, opens: bool) {
        self.with_state(|s| {
            let Some(part) = s.parts.get_mut(&(topic.to_string(), partition)) else {
                return;
            };
            if part.stale {
                return;
            }
            let opener_in_flight = batch.transactional
                && batch.marker.is_none()
                && !opens
                && part.pending.contains_key(&batch.producer_id);
            if (batch.transactional || batch.marker.is_some()) && !opener_in_flight {
                part.index.observe(batch);
                part.pending.remove(&batch.producer_id);
            }
            part.end = part.end.max(batch.last_offset.saturating_add(1));
        });
    }

    /// An append of the partition whose outcome is unknown: the pending bounds stay, and
    /// the index is rebuilt from the log before it is used again.
    pub(crate) fn append_unknown(&self, topic: &str, partition: i32) {
        self.with_state(|s| {
            if let Some(part) = s.parts.get_mut(&(topic.to_string(), partition)) {
                part.stale = true;
            }
        });
    }

    /// The last stable offset: `high_watermark` unless a transaction is open (or being
    /// opened) below it.
    pub(crate) fn lso(&self, topic: &str, partition: i32, high_watermark: i64) -> i64 {
        self.with_state(|s| {
            s.parts
                .get(&(topic.to_string(), partition))
                .map_or(high_watermark, |p| p.lso(high_watermark))
        })
        .unwrap_or(high_watermark)
    }

    /// The LSO and the aborted transactions for a `read_committed` read, from one look at
    /// the index: `to` gets the LSO and returns the end of what the read returns (`None`:
    /// nothing, so no aborted transactions). `None` when the index is not held any more
    /// (the view changed since [`TxnPartitions::ensure_ready`]): the read must not be
    /// answered as if nothing were open or aborted.
    pub(crate) fn stable_read(
        &self,
        topic: &str,
        partition: i32,
        high_watermark: i64,
        from: i64,
        to: impl FnOnce(i64) -> Option<i64>,
    ) -> Option<(i64, Vec<AbortedTxn>)> {
        self.with_state(|s| {
            let p = s.parts.get(&(topic.to_string(), partition))?;
            let lso = p.lso(high_watermark);
            let aborted = to(lso)
                .map(|to| p.index.aborted(from, to))
                .unwrap_or_default();
            Some((lso, aborted))
        })
        .flatten()
    }

    /// The last stable offset as [`TxnPartitions::lso`], `None` when the index is not held
    /// (see [`TxnPartitions::stable_read`]).
    pub(crate) fn lso_held(&self, topic: &str, partition: i32, high_watermark: i64) -> Option<i64> {
        self.stable_read(topic, partition, high_watermark, 0, |_| None)
            .map(|(lso, _)| lso)
    }

    /// Aborted transactions intersecting `[from, to)`.
    #[cfg(test)]
    pub(crate) fn aborted(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        to: i64,
    ) -> Vec<AbortedTxn> {
        self.with_state(|s| {
            s.parts
                .get(&(topic.to_string(), partition))
                .map(|p| p.index.aborted(from, to))
                .unwrap_or_default()
        })
        .unwrap_or_default()
    }

    /// Whether `topic` is known to carry the store's transactional flag; else the caller
    /// sets it and then calls [`TxnPartitions::flagged`].
    pub(crate) fn is_flagged(&self, topic: &str) -> bool {
        self.with_state(|s| s.flagged.contains(topic))
            .unwrap_or(false)
    }

    /// Remembers that `topic` carries the store's transactional flag.
    pub(crate) fn flagged(&self, topic: &str) {
        let max = self.limits.max_flagged_topics.max(1);
        self.with_state(|s| {
            if s.flagged.len() >= max {
                // Asking the store again is harmless: the flag is idempotent.
                s.flagged.clear();
            }
            s.flagged.insert(topic.to_string());
        });
    }

    /// Checks a marker against the partition's index (under its producer lock, after
    /// recovery): the code to answer without writing, or `None` to write it.
    fn check_marker(&self, m: &MarkerWrite, producer_epoch: Option<i16>) -> Option<ErrorCode> {
        self.with_state(|s| {
            let tick = s.next_tick();
            let Some(part) = s
                .parts
                .get_mut(&(m.topic.clone(), m.partition))
                .filter(|p| !p.stale)
            else {
                return Some(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            };
            part.last_used = tick;
            let last = part.index.last_marker(m.producer_id);
            if last.is_some_and(|(_, coordinator)| m.coordinator_epoch < coordinator) {
                return Some(ErrorCode::TRANSACTION_COORDINATOR_FENCED);
            }
            let current = last
                .map(|(epoch, _)| epoch)
                .into_iter()
                .chain(producer_epoch)
                .max();
            if current.is_some_and(|e| m.producer_epoch < e) {
                return Some(ErrorCode::INVALID_PRODUCER_EPOCH);
            }
            if !part.open(m.producer_id) {
                s.guards
                    .remove(&(m.topic.clone(), m.partition, m.producer_id));
                return Some(ErrorCode::NONE);
            }
            None
        })
        .unwrap_or(Some(ErrorCode::UNKNOWN_SERVER_ERROR))
    }

    /// Writes one marker to a partition this gateway leads.
    pub(crate) async fn write_marker(&self, broker: &Broker, m: &MarkerWrite) -> ErrorCode {
        let log = broker.stores.log.as_ref();
        let producers = &broker.producers;
        let stripe = producers.stripe(&m.topic, m.partition);
        let _lock = producers.lock(vec![stripe]).await;
        if let Err(code) = self
            .ensure_recovered(log, broker.membership.as_ref(), &m.topic, m.partition)
            .await
        {
            return code;
        }
        let known_epoch = producers.epoch(&m.topic, m.partition, m.producer_id);
        if let Some(code) = self.check_marker(m, known_epoch) {
            if code == ErrorCode::NONE {
                // Nothing open here: still no older epoch may write afterwards.
                producers.fence(
                    &m.topic,
                    m.partition,
                    m.producer_id,
                    m.producer_epoch,
                    crate::broker::now_ms(),
                );
            }
            return code;
        }
        let now = crate::broker::now_ms();
        let marker = Marker {
            commit: m.commit,
            coordinator_epoch: m.coordinator_epoch,
        };
        let batch = marker_batch(m.producer_id, m.producer_epoch, marker, now);
        let appended = tokio::time::timeout(
            MARKER_APPEND_TIMEOUT,
            log.append(&m.topic, m.partition, vec![batch], now),
        )
        .await;
        let outcome = match appended {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                self.append_unknown(&m.topic, m.partition);
                producers.unrecover(&m.topic, m.partition);
                return match e.error_code() {
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    _ => ErrorCode::NOT_LEADER_OR_FOLLOWER,
                };
            }
            Err(_) => {
                self.append_unknown(&m.topic, m.partition);
                producers.unrecover(&m.topic, m.partition);
                return ErrorCode::REQUEST_TIMED_OUT;
            }
        };
        self.appended(
            &m.topic,
            m.partition,
            &BatchSummary {
                base_offset: outcome.base_offset,
                last_offset: outcome.base_offset,
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                transactional: true,
                marker: Some(marker),
            },
            false,
        );
        self.with_state(|s| {
            s.guards
                .remove(&(m.topic.clone(), m.partition, m.producer_id));
            // Aborted transactions wholly below the log start are readable no more.
            if let Some(part) = s.parts.get_mut(&(m.topic.clone(), m.partition)) {
                part.index.forget_before(outcome.log_start_offset);
            }
        });
        producers.fence(&m.topic, m.partition, m.producer_id, m.producer_epoch, now);
        self.stats.markers.fetch_add(1, Ordering::Relaxed);
        ErrorCode::NONE
    }

    /// Forgets a deleted topic.
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.with_state(|s| {
            s.parts.retain(|(t, _), _| t != topic);
            s.guards.retain(|(t, _, _), _| t != topic);
            s.flagged.remove(topic);
        });
    }

    /// Partition indexes and guards held (tests).
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        self.with_state(|s| (s.parts.len(), s.guards.len()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "partitions_tests.rs"]
mod tests;
