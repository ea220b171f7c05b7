//! Idempotent producer state (KIP-98): producer ids, duplicate and ordering checks on
//! produced batches.
//!
//! A batch from an idempotent producer carries a producer id, an epoch and the sequence
//! number of its first record. Per partition and producer the broker remembers the epoch
//! and the last five batches it appended (Kafka's `max.in.flight` bound for idempotence).
//! A batch identical in sequence range to one of those is a retry of a write that already
//! landed: it is answered with the original offset and not appended again. A sequence gap
//! is `OUT_OF_ORDER_SEQUENCE_NUMBER`; an old epoch is `INVALID_PRODUCER_EPOCH`.
//!
//! The check and the append must be one step, or the same batch sent on two connections
//! at once passes the check twice and lands twice. The produce handler therefore holds
//! the producer's lock on the partition ([`Producers::lock_producers`]) from the check
//! until the batch holds its place in the store, and then puts it in flight
//! ([`Producers::begin`]) before the lock goes. The producer's next batch is checked
//! against the batches in flight (its sequence follows the last of them; a retry of
//! one waits for that one's outcome, [`Verdict::InFlight`]), so an idempotent
//! producer's requests overlap like anyone's, as Kafka's `max.in.flight` of five
//! allows. A batch in flight is recorded once it and every batch before it are
//! confirmed ([`Ticket::landed`]), whatever order the confirmations come in. One that
//! fails ([`Ticket::failed`], or its request dropped) takes the batches behind it out of
//! flight, since the store fails them too (`LogStore::submit`), and marks the partition
//! for recovery: the producer resends them in order, and a failed append that landed
//! after all is found in the log. A check reads only its own producer's state, so
//! different producers' batches need not wait for each other: the partition's own lock
//! ([`Producers::lock_shared`]) is held shared by their appends until they are settled,
//! and exclusively ([`Producers::lock`]) by whatever replaces or depends on the whole
//! partition's state: a recovery, a transactional batch, a transaction marker. A
//! recovery thus never runs while an append it could miss is in flight, and batches of
//! different producers on one partition are appended concurrently (the store can then
//! send them together). Both kinds of lock are fixed sets of stripes (by topic,
//! partition and producer id; by topic and partition), taken producers' first, each
//! kind in index order, so a request naming many partitions cannot deadlock with
//! another.
//!
//! Producer ids are random 48-bit numbers below the gateway's instance id (the high 16
//! bits, so gateways sharing a store never collide): a client cannot guess another
//! producer's id to spoof its sequences. The gateway remembers the ids it handed out
//! with their current epoch. InitProducerId with an id and epoch (KIP-360) bumps the
//! epoch only when both match what this gateway handed out; anything else gets a fresh
//! id, which is what Kafka answers every non-transactional InitProducerId, so a client
//! can never fence another producer. That holds across gateways too: a producer whose
//! id came from a gateway that died (or from this one before a restart) asks for a bump
//! and gets a fresh id at epoch 0, restarts its sequences, and goes on; its old id
//! stays valid on every partition (producer ids seen in the log are not trusted for a
//! bump, since any consumer can read them).
//!
//! A batch may carry a higher epoch than the partition has seen, from sequence 0: an
//! idempotent producer may bump its own epoch (librdkafka does, with no InitProducerId,
//! after a request timed out) and Kafka accepts that. Refusing it with
//! `INVALID_PRODUCER_EPOCH` is fatal to such a producer. So producer ids work as in
//! Kafka: they are not credentials, and a client that knows another producer's id (it
//! is in every batch a consumer reads) can write under it; topic write permissions
//! (ACLs) are what keeps a client off a topic.
//!
//! ## Leadership moves and restarts
//!
//! Producer state is kept in memory, but every stored batch keeps its producer header,
//! so the log itself says what each producer wrote last. Before the first idempotent
//! batch of a partition is checked after this gateway starts (or starts leading the
//! partition), the produce handler calls [`Producers::ensure_recovered`] under the
//! partition's stripe lock: it confirms with the current view that this gateway leads
//! the partition, reads back the last `producer_state_recovery_bytes` of the log (only
//! batch headers are kept, see [`recovery`]) and rebuilds, per producer, the highest
//! epoch and its last five batches, replacing whatever this gateway held for the
//! partition. At most `max_concurrent_producer_recoveries` recoveries run at once over
//! the gateway (each holds up to a window of read batches); the partitions of one request
//! are recovered concurrently within that bound and the request's timeout. Batches of other partitions are not held up; two batches of the same
//! partition cannot race the recovery, since the second waits for the lock and then
//! sees the rebuilt state. A retry from before the window is accepted as new if its
//! producer does not appear in the window at all, or refused as out of order if it does
//! (as Kafka refuses a batch older than the five it caches).
//!
//! A partition stays recovered while this gateway leads it without a break. Views are
//! seen in order (the current one is taken under the state lock at each check): a view
//! right after the last one seen keeps the partitions this gateway still leads; a jump
//! of several views (it may have lost and regained a partition in between), a lapsed
//! lease or a deleted topic forget the marks, and the next batch recovers again. A lease
//! that lapses and comes back with no batch checked in between goes unnoticed here; the
//! bridge's membership stops a gateway whose lease lapsed, so that does not arise there.
//!
//! An append of an idempotent batch that fails or times out also marks the partition
//! not recovered: the store may still write the batch, and only the log can tell, so
//! the producer's retry is checked against a fresh read of it.
//!
//! A recovery that fails (store error, the request's timeout, the view changing
//! meanwhile) appends nothing and answers `NOT_LEADER_OR_FOLLOWER`: it is retriable and
//! tells the client nothing was written, as Kafka answers while a new leader is still
//! loading a partition. `REQUEST_TIMED_OUT` would say the write may have landed and
//! make an idempotent producer bump its epoch for nothing.
//!
//! A producer the gateway has no state for (its first write, one not in the recovered
//! window, state expired or evicted) is accepted at any sequence, as Kafka does since
//! KIP-360. State expires after `producer.id.expiration.ms` without a write, and each
//! table is capped: when full, the expired entries go first, then the least recently
//! used hundredth. A recovery installs at most a table's worth of producers, the ones
//! seen last.

mod recovery;

use crate::cluster::{Route, leader};
use kafka_protocol::ErrorCode;
use kafka_store::LogStore;
use kafka_store::cluster::Membership;
use recovery::TailBatch;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::debug;

const CACHED_BATCHES: usize = 5;
/// Lock stripes for the check-and-append step.
const STRIPES: usize = 256;
/// Bits of a producer id below the instance id.
const ID_BITS: u32 = 48;
/// Recoveries at once unless [`Producers::limit_recoveries`] says otherwise.
const DEFAULT_RECOVERIES: usize = 8;
/// How long a recovery reads a lagging log again, unless configured.
const DEFAULT_LAG_WAIT_MS: i64 = 10_000;
/// The first pause before a lagging log is read again; each next one doubles, up to
/// [`LAG_PAUSE_MAX`].
const LAG_PAUSE_MIN: Duration = Duration::from_millis(10);
const LAG_PAUSE_MAX: Duration = Duration::from_millis(500);

/// The identity fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchId {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) first_seq: i32,
    pub(crate) records: i32,
}

impl BatchId {
    fn last_seq(&self) -> i32 {
        // Sequences wrap at i32::MAX back to 0.
        ((i64::from(self.first_seq) + i64::from(self.records) - 1) % (i64::from(i32::MAX) + 1))
            as i32
    }

    /// Whether the batch comes from an idempotent producer.
    pub(crate) fn idempotent(&self) -> bool {
        self.producer_id >= 0
    }
}

#[derive(Debug)]
struct Entry {
    epoch: i16,
    /// (first sequence, last sequence, base offset) of recent batches, oldest first.
    recent: VecDeque<(i32, i32, i64)>,
    /// Batches handed to the store and not yet confirmed, in the order they took their
    /// place; each moves to `recent` once it and every batch before it is confirmed.
    inflight: VecDeque<Inflight>,
    last_used_ms: i64,
}

impl Entry {
    fn new(epoch: i16, now_ms: i64) -> Entry {
        Entry {
            epoch,
            recent: VecDeque::with_capacity(CACHED_BATCHES),
            inflight: VecDeque::new(),
            last_used_ms: now_ms,
        }
    }

    /// Remembers a landed batch of `epoch` among the recent ones.
    fn push_recent(&mut self, epoch: i16, first: i32, last: i32, base_offset: i64) {
        if epoch < self.epoch {
            // Fenced or bumped past meanwhile.
            return;
        }
        if epoch > self.epoch {
            self.epoch = epoch;
            self.recent.clear();
        }
        if self.recent.len() == CACHED_BATCHES {
            self.recent.pop_front();
        }
        self.recent.push_back((first, last, base_offset));
    }
}

/// What the waiters on a batch in flight see: `None` until it is settled, then its base
/// offset or the error its append failed with.
type Outcome = Option<Result<i64, ErrorCode>>;

/// An idempotent batch handed to the store and not yet confirmed ([`Producers::begin`]).
#[derive(Debug)]
struct Inflight {
    ticket: u64,
    epoch: i16,
    first: i32,
    last: i32,
    /// Its base offset, once confirmed while an earlier batch still is not.
    landed: Option<i64>,
    outcome: tokio::sync::watch::Sender<Outcome>,
}

/// A batch that is a retry of one still in flight (the same producer, epoch and
/// sequences, sent again on another connection before the first was answered): it is
/// answered with that batch's outcome, never appended a second time.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    ticket: u64,
    outcome: tokio::sync::watch::Receiver<Outcome>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.ticket == other.ticket
    }
}

impl Eq for InFlight {}

impl InFlight {
    /// The original's base offset once it is confirmed, or the error it failed with.
    /// If it is dropped unsettled (its partition's state rebuilt or forgotten
    /// meanwhile) whether it landed is unknown: `REQUEST_TIMED_OUT`.
    pub(crate) async fn outcome(mut self) -> Result<i64, ErrorCode> {
        match self.outcome.wait_for(Option::is_some).await {
            Ok(settled) => (*settled).unwrap_or(Err(ErrorCode::UNKNOWN_SERVER_ERROR)),
            Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT),
        }
    }
}

/// An idempotent batch's place among its producer's batches in flight on a partition,
/// from [`Producers::begin`] until it is settled with [`Ticket::landed`] or
/// [`Ticket::failed`]. Dropped unsettled (the request was cancelled) it counts as failed
/// with an unknown outcome, so the producer's next batches are never checked against a
/// batch nobody will settle.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    producers: &'a Producers,
    key: Key,
    ticket: u64,
    settled: bool,
}

impl Ticket<'_> {
    /// The store confirmed the batch at `base_offset`.
    pub(crate) fn landed(mut self, base_offset: i64, now_ms: i64) {
        self.settled = true;
        self.producers
            .settle(&self.key, self.ticket, Ok(base_offset), now_ms);
    }

    /// The append failed, or its outcome is unknown (`code` is what retries of it are
    /// answered with).
    pub(crate) fn failed(mut self, code: ErrorCode) {
        self.settled = true;
        self.producers.settle(&self.key, self.ticket, Err(code), 0);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.producers
                .settle(&self.key, self.ticket, Err(ErrorCode::REQUEST_TIMED_OUT), 0);
        }
    }
}

/// A producer id this gateway handed out.
#[derive(Debug, Clone, Copy)]
struct Issued {
    epoch: i16,
    last_used_ms: i64,
}

/// What to do with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Append it.
    Append,
    /// Already appended at this base offset: answer success without appending.
    Duplicate(i64),
    /// A retry of a batch still in flight: answer with its outcome, append nothing.
    InFlight(InFlight),
}

type Key = (String, i32, i64);

#[derive(Debug, Default)]
struct State {
    partitions: HashMap<Key, Entry>,
    issued: HashMap<i64, Issued>,
    leadership: Leadership,
    /// Partitions whose last recovery read showed a producer behind a batch recorded
    /// here as confirmed, and when such a read was first seen (ms): the log is read
    /// again until it catches up or the lag wait has passed since then.
    lagging: HashMap<(String, i32), i64>,
}

/// Which partitions' producer state is current: rebuilt from the log since this gateway
/// last started leading them.
#[derive(Debug, Default)]
struct Leadership {
    /// The version of the last view seen (0: none yet).
    version: u64,
    /// Partitions recovered and led without a break since.
    recovered: HashSet<(String, i32)>,
}

impl Leadership {
    /// Brings the recovered set up to `route`'s view. A view right after the last one
    /// seen keeps the partitions this gateway still leads; any other (views were
    /// skipped, so a partition may have left and come back) or a lost lease forgets
    /// them all.
    fn observe(&mut self, route: &Route) {
        let version = route.view.version;
        if !route.owner {
            self.recovered.clear();
        } else if version == self.version.wrapping_add(1) {
            self.recovered
                .retain(|(t, p)| leader(&route.view, t, *p) == Some(route.me));
        } else if version != self.version {
            self.recovered.clear();
        }
        self.version = version;
    }
}

/// Whether a partition's producer state can be used for a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Recovered and led since.
    Ready,
    /// To be rebuilt from the log first; the view version it is rebuilt for.
    Recover(u64),
}

/// Counts of the recoveries since start (read by the metrics endpoint).
#[derive(Debug, Default)]
pub(crate) struct RecoveryStats {
    /// Partitions whose producer state was rebuilt.
    pub(crate) recoveries: AtomicU64,
    /// Recoveries that failed (store error, timeout, leadership moved meanwhile).
    pub(crate) failures: AtomicU64,
    /// Bytes read from the store by recoveries.
    pub(crate) bytes: AtomicU64,
    /// Producer states rebuilt.
    pub(crate) producers: AtomicU64,
    /// Recovery reads whose log tail showed a producer behind a batch this gateway had
    /// recorded as confirmed (a read of the log that lags what the store acknowledged):
    /// not installed, the log is read again.
    pub(crate) behind: AtomicU64,
    /// Recoveries installed although their tail still showed a producer behind, once
    /// the lag wait had passed (the store lost batches it had acknowledged, or its
    /// reads lag for longer than the wait).
    pub(crate) behind_accepted: AtomicU64,
}

/// What [`Producers::install`] did with a tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Installed {
    /// Installed, with this many producer states.
    Kept(usize),
    /// The gateways' view changed since the recovery began: nothing kept.
    ViewChanged,
    /// The tail shows a producer behind a batch recorded here as confirmed, and the lag
    /// wait has not passed: nothing kept, the log is to be read again.
    Behind,
}

/// Producer ids handed out and the producer state of every partition.
#[derive(Debug)]
pub(crate) struct Producers {
    state: Mutex<State>,
    /// Partition locks: shared by idempotent appends, exclusive for recoveries and
    /// transactional work.
    stripes: Box<[tokio::sync::RwLock<()>]>,
    /// Producer-on-partition locks: a producer's check and record on a partition.
    producer_stripes: Box<[tokio::sync::Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
    /// The instance id, shifted into the high bits.
    base: i64,
    expiration_ms: i64,
    max_entries: usize,
    /// Recovery counters.
    pub(crate) stats: RecoveryStats,
    /// Permits for recoveries running at once.
    recoveries: tokio::sync::Semaphore,
    /// How long a recovery reads again while its tail lags (ms).
    lag_wait_ms: i64,
    /// The next [`Ticket`]'s number.
    tickets: AtomicU64,
}

impl Producers {
    /// State for the gateway `instance_id`, expiring after `expiration` without a write,
    /// with at most `max_entries` entries per table.
    pub(crate) fn new(instance_id: u16, expiration: Duration, max_entries: usize) -> Self {
        Producers {
            state: Mutex::new(State::default()),
            stripes: (0..STRIPES).map(|_| tokio::sync::RwLock::new(())).collect(),
            producer_stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            base: i64::from(instance_id & 0x7fff) << ID_BITS,
            expiration_ms: i64::try_from(expiration.as_millis()).unwrap_or(i64::MAX),
            max_entries: max_entries.max(1),
            stats: RecoveryStats::default(),
            recoveries: tokio::sync::Semaphore::new(DEFAULT_RECOVERIES),
            lag_wait_ms: DEFAULT_LAG_WAIT_MS,
            tickets: AtomicU64::new(0),
        }
    }

    /// Reads a partition's log again for up to `wait` while it shows a producer behind
    /// a batch this gateway saw confirmed, before taking it as it is.
    pub(crate) fn wait_for_lagging_reads(mut self, wait: Duration) -> Self {
        self.lag_wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// Allows at most `at_once` recoveries to run at the same time (at least one).
    pub(crate) fn limit_recoveries(mut self, at_once: usize) -> Self {
        self.recoveries = tokio::sync::Semaphore::new(at_once.max(1));
        self
    }

    fn expired(&self, last_used_ms: i64, now_ms: i64) -> bool {
        now_ms.saturating_sub(last_used_ms) > self.expiration_ms
    }

    /// A fresh random producer id at epoch 0.
    pub(crate) fn allocate(&self, now_ms: i64) -> Option<(i64, i16)> {
        let mut state = self.state.lock().ok()?;
        self.make_room_issued(&mut state.issued, now_ms);
        // The table holds at most `max_entries` of 2^48 ids, so a free one is found at
        // once in practice.
        loop {
            let low = (rand::random::<u64>() & ((1u64 << ID_BITS) - 1)) as i64;
            let id = self.base | low;
            if let std::collections::hash_map::Entry::Vacant(slot) = state.issued.entry(id) {
                slot.insert(Issued {
                    epoch: 0,
                    last_used_ms: now_ms,
                });
                return Some((id, 0));
            }
        }
    }

    /// InitProducerId: the epoch bumped when `(producer_id, epoch)` is what this gateway
    /// handed out last for that id (KIP-360), else a fresh id.
    pub(crate) fn init(&self, producer_id: i64, epoch: i16, now_ms: i64) -> Option<(i64, i16)> {
        if producer_id >= 0 && (0..i16::MAX - 1).contains(&epoch) {
            let mut state = self.state.lock().ok()?;
            if let Some(issued) = state.issued.get_mut(&producer_id)
                && issued.epoch == epoch
                && !self.expired(issued.last_used_ms, now_ms)
            {
                issued.epoch = epoch + 1;
                issued.last_used_ms = now_ms;
                return Some((producer_id, epoch + 1));
            }
        }
        self.allocate(now_ms)
    }

    /// The lock stripe of a partition.
    pub(crate) fn stripe(&self, topic: &str, partition: i32) -> usize {
        (self.hasher.hash_one((topic, partition)) % STRIPES as u64) as usize
    }

    /// The lock stripe of a producer on a partition.
    pub(crate) fn producer_stripe(&self, topic: &str, partition: i32, producer_id: i64) -> usize {
        (self.hasher.hash_one((topic, partition, producer_id)) % STRIPES as u64) as usize
    }

    /// Takes the given partition stripes' locks exclusively, in index order (so two
    /// requests never wait on each other in a cycle): no idempotent append of those
    /// partitions is checked or in flight while they are held.
    pub(crate) async fn lock(
        &self,
        stripes: Vec<usize>,
    ) -> Vec<tokio::sync::RwLockWriteGuard<'_, ()>> {
        in_order(&self.stripes, stripes, tokio::sync::RwLock::write).await
    }

    /// Takes the given partition stripes' locks shared, in index order: idempotent
    /// appends of different producers hold them together.
    pub(crate) async fn lock_shared(
        &self,
        stripes: Vec<usize>,
    ) -> Vec<tokio::sync::RwLockReadGuard<'_, ()>> {
        in_order(&self.stripes, stripes, tokio::sync::RwLock::read).await
    }

    /// Takes the given producer stripes' locks in index order; taken before any
    /// partition lock.
    pub(crate) async fn lock_producers(
        &self,
        stripes: Vec<usize>,
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        in_order(&self.producer_stripes, stripes, tokio::sync::Mutex::lock).await
    }

    /// Checks a batch against the producer's state.
    pub(crate) fn check(
        &self,
        topic: &str,
        partition: i32,
        b: BatchId,
        now_ms: i64,
    ) -> Result<Verdict, ErrorCode> {
        if !b.idempotent() {
            return Ok(Verdict::Append);
        }
        let Ok(state) = self.state.lock() else {
            return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
        };
        let Some(e) = state
            .partitions
            .get(&(topic.to_string(), partition, b.producer_id))
            .filter(|e| !self.expired(e.last_used_ms, now_ms))
        else {
            return Ok(Verdict::Append);
        };
        // Batches in flight come after the recorded ones, and may have bumped the epoch.
        let (epoch, last) = match e.inflight.back() {
            Some(f) => (f.epoch, Some(f.last)),
            None => (e.epoch, e.recent.back().map(|(_, last, _)| *last)),
        };
        if b.epoch < epoch {
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        if b.epoch > epoch {
            return if b.first_seq == 0 {
                Ok(Verdict::Append)
            } else {
                Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
            };
        }
        if b.epoch == e.epoch
            && let Some(&(_, _, offset)) = e
                .recent
                .iter()
                .find(|(first, last, _)| *first == b.first_seq && *last == b.last_seq())
        {
            return Ok(Verdict::Duplicate(offset));
        }
        if let Some(f) = e
            .inflight
            .iter()
            .find(|f| f.epoch == b.epoch && f.first == b.first_seq && f.last == b.last_seq())
        {
            return Ok(match f.landed {
                Some(offset) => Verdict::Duplicate(offset),
                None => Verdict::InFlight(InFlight {
                    ticket: f.ticket,
                    outcome: f.outcome.subscribe(),
                }),
            });
        }
        let expected = last.map_or(
            b.first_seq,
            |last| if last == i32::MAX { 0 } else { last + 1 },
        );
        if b.first_seq != expected {
            return Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
        }
        Ok(Verdict::Append)
    }

    /// Puts a batch that [`Producers::check`] let through, and that now holds its place
    /// in the store, in flight: the producer's next batches are checked against it, a
    /// retry of it waits for its outcome, and it is recorded once it and the batches
    /// before it are confirmed. `None` for a batch of no idempotent producer. Called
    /// under the producer's lock on the partition, like the check.
    pub(crate) fn begin(
        &self,
        topic: &str,
        partition: i32,
        b: BatchId,
        now_ms: i64,
    ) -> Option<Ticket<'_>> {
        if !b.idempotent() {
            return None;
        }
        let mut guard = self.state.lock().ok()?;
        let state = &mut *guard;
        let key = (topic.to_string(), partition, b.producer_id);
        let e = self.entry(&mut state.partitions, key.clone(), b.epoch, now_ms);
        if self.expired(e.last_used_ms, now_ms) && e.inflight.is_empty() {
            *e = Entry::new(b.epoch, now_ms);
        }
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        e.inflight.push_back(Inflight {
            ticket,
            epoch: b.epoch,
            first: b.first_seq,
            last: b.last_seq(),
            landed: None,
            outcome: tokio::sync::watch::Sender::new(None),
        });
        e.last_used_ms = now_ms;
        Some(Ticket {
            producers: self,
            key,
            ticket,
            settled: false,
        })
    }

    /// Settles the batch in flight `ticket` of `key`. Landed: its waiters get its offset,
    /// and the leading batches that have landed move to the recent ones, in order.
    /// Failed: it and every batch after it leave the batches in flight (the store lands
    /// nothing of a producer after a batch of its that failed, and the producer resends
    /// them in order), their waiters get the error, and the partition is read from the
    /// log before its next idempotent batch is checked, since a failed append may still
    /// have landed.
    fn settle(&self, key: &Key, ticket: u64, outcome: Result<i64, ErrorCode>, now_ms: i64) {
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let state = &mut *guard;
        let Some(e) = state.partitions.get_mut(key) else {
            return;
        };
        let Some(at) = e.inflight.iter().position(|f| f.ticket == ticket) else {
            return;
        };
        match outcome {
            Ok(base_offset) => {
                e.inflight[at].landed = Some(base_offset);
                e.inflight[at].outcome.send_replace(Some(Ok(base_offset)));
                let mut epoch = None;
                while let Some(f) = e.inflight.front() {
                    let Some(offset) = f.landed else { break };
                    let (fe, first, last) = (f.epoch, f.first, f.last);
                    e.inflight.pop_front();
                    e.push_recent(fe, first, last, offset);
                    epoch = Some(fe);
                }
                e.last_used_ms = e.last_used_ms.max(now_ms);
                if let Some(epoch) = epoch
                    && let Some(issued) = state.issued.get_mut(&key.2)
                {
                    issued.last_used_ms = issued.last_used_ms.max(now_ms);
                    issued.epoch = issued.epoch.max(epoch);
                }
            }
            Err(code) => {
                for f in e.inflight.drain(at..) {
                    f.outcome.send_replace(Some(Err(code)));
                }
                state.leadership.recovered.remove(&(key.0.clone(), key.1));
            }
        }
    }

    /// Records an appended batch: [`Producers::begin`] and [`Ticket::landed`] at once.
    #[cfg(test)]
    pub(crate) fn record(
        &self,
        topic: &str,
        partition: i32,
        b: BatchId,
        base_offset: i64,
        now_ms: i64,
    ) {
        if let Some(ticket) = self.begin(topic, partition, b, now_ms) {
            ticket.landed(base_offset, now_ms);
        }
    }

    /// The epoch the partition's state holds for `producer_id`, if any.
    pub(crate) fn epoch(&self, topic: &str, partition: i32, producer_id: i64) -> Option<i16> {
        let state = self.state.lock().ok()?;
        state
            .partitions
            .get(&(topic.to_string(), partition, producer_id))
            .map(|e| e.epoch)
    }

    /// A transaction marker at `epoch` was written for `producer_id`: from now on the
    /// partition refuses its batches of older epochs (a fenced producer's), and a newer
    /// epoch starts its sequences afresh.
    pub(crate) fn fence(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) {
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let state = &mut *guard;
        let key = (topic.to_string(), partition, producer_id);
        let e = self.entry(&mut state.partitions, key, epoch, now_ms);
        if epoch > e.epoch {
            e.epoch = epoch;
            e.recent.clear();
        }
        e.last_used_ms = now_ms;
    }

    /// The entry of `key`, made (at `epoch`, room made for it in the capped table) if
    /// there is none.
    fn entry<'s>(
        &self,
        partitions: &'s mut HashMap<Key, Entry>,
        key: Key,
        epoch: i16,
        now_ms: i64,
    ) -> &'s mut Entry {
        if !partitions.contains_key(&key) {
            make_room(
                partitions,
                self.max_entries,
                |e| e.last_used_ms,
                |t| self.expired(t, now_ms),
            );
        }
        partitions
            .entry(key)
            .or_insert_with(|| Entry::new(epoch, now_ms))
    }

    fn make_room_issued(&self, issued: &mut HashMap<i64, Issued>, now_ms: i64) {
        make_room(
            issued,
            self.max_entries,
            |i| i.last_used_ms,
            |t| self.expired(t, now_ms),
        );
    }

    /// Forgets every producer of a topic (after it is deleted).
    pub(crate) fn forget_topic(&self, topic: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.partitions.retain(|(t, _, _), _| t != topic);
            state.leadership.recovered.retain(|(t, _)| t != topic);
            state.lagging.retain(|(t, _), _| t != topic);
        }
    }

    /// Marks `topic`'s `partition` as not recovered: its next idempotent batch rebuilds
    /// the state from the log first (after an append whose outcome is unknown).
    pub(crate) fn unrecover(&self, topic: &str, partition: i32) {
        if let Ok(mut state) = self.state.lock() {
            state
                .leadership
                .recovered
                .remove(&(topic.to_string(), partition));
        }
    }

    /// Whether this gateway leads `topic`'s `partition` now (by `membership`'s current
    /// view, taken under the state lock so views are seen in order) and whether its
    /// producer state must be rebuilt first.
    pub(crate) fn readiness(
        &self,
        membership: &dyn Membership,
        topic: &str,
        partition: i32,
    ) -> Result<Readiness, ErrorCode> {
        let Ok(mut state) = self.state.lock() else {
            return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
        };
        let route = Route::of(membership);
        state.leadership.observe(&route);
        if !route.leads(topic, partition) {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        if state
            .leadership
            .recovered
            .contains(&(topic.to_string(), partition))
        {
            Ok(Readiness::Ready)
        } else {
            Ok(Readiness::Recover(route.view.version))
        }
    }

    /// Replaces `topic`'s `partition` producer state by what `tail` (oldest first) shows
    /// and marks it recovered, unless the view changed since `version` or the tail lags
    /// (see [`Installed`]). Per producer: the highest epoch and its last batches at that
    /// epoch. The producers seen last are kept when there are more than the table holds.
    ///
    /// A producer whose last batch this gateway recorded as confirmed (its state is kept
    /// across [`Producers::unrecover`]) must show that batch in the tail. If it does not,
    /// the read lags the store: installing it would put the producer back, and its next
    /// batch would look like a gap (`OUT_OF_ORDER_SEQUENCE_NUMBER`, fatal to most
    /// clients). Such a tail is refused until the lag wait has passed since the first
    /// one, then taken as it is (the log is what consumers read).
    fn install(
        &self,
        topic: &str,
        partition: i32,
        version: u64,
        tail: &[TailBatch],
        now_ms: i64,
    ) -> Installed {
        let Ok(mut guard) = self.state.lock() else {
            return Installed::ViewChanged;
        };
        let state = &mut *guard;
        if state.leadership.version != version {
            return Installed::ViewChanged;
        }
        // Per producer: its state and the position of its last batch in the tail.
        let mut rebuilt: HashMap<i64, (Entry, usize)> = HashMap::new();
        for (at, b) in tail.iter().enumerate() {
            let (e, last) = rebuilt
                .entry(b.id.producer_id)
                .or_insert_with(|| (Entry::new(b.id.epoch, now_ms), at));
            if b.id.epoch < e.epoch {
                // An older epoch after a newer one: the producer was fenced meanwhile.
                continue;
            }
            if b.id.epoch > e.epoch {
                e.epoch = b.id.epoch;
                e.recent.clear();
            }
            *last = at;
            if b.marker {
                // A transaction marker carries the producer's epoch but no sequence.
                continue;
            }
            if e.recent.len() == CACHED_BATCHES {
                e.recent.pop_front();
            }
            e.recent
                .push_back((b.id.first_seq, b.id.last_seq(), b.base_offset));
            *last = at;
        }
        let behind = state
            .partitions
            .iter()
            .filter(|((t, p, _), _)| *p == partition && t == topic)
            .filter_map(|((_, _, id), known)| {
                let &(_, recorded, _) = known.recent.back()?;
                let shown = rebuilt.get(id).map(|(e, _)| {
                    (
                        e.epoch,
                        e.recent.back().map_or(i32::MIN, |&(_, last, _)| last),
                    )
                });
                match shown {
                    Some((epoch, last))
                        if epoch < known.epoch || (epoch == known.epoch && last < recorded) =>
                    {
                        Some((*id, recorded, last))
                    }
                    _ => None,
                }
            })
            .collect::<Vec<_>>();
        let key = (topic.to_string(), partition);
        if let Some(&(producer_id, recorded, shown)) = behind.first() {
            self.stats.behind.fetch_add(1, Ordering::Relaxed);
            let first = !state.lagging.contains_key(&key);
            let since = *state.lagging.entry(key.clone()).or_insert(now_ms);
            let waited_ms = now_ms.saturating_sub(since);
            if waited_ms < self.lag_wait_ms {
                if first {
                    tracing::warn!(
                        topic,
                        partition,
                        producers = behind.len(),
                        producer_id,
                        recorded_last_sequence = recorded,
                        shown_last_sequence = shown,
                        wait_ms = self.lag_wait_ms,
                        "the log read to recover producer state is behind batches this \
                         gateway saw confirmed; reading it again"
                    );
                }
                return Installed::Behind;
            }
            self.stats.behind_accepted.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                topic,
                partition,
                producers = behind.len(),
                producer_id,
                recorded_last_sequence = recorded,
                shown_last_sequence = shown,
                waited_ms,
                "the log still lacks batches this gateway saw confirmed; producer state \
                 recovered from it as it is (its producers' next batches may be refused \
                 as out of order)"
            );
        } else if let Some(since) = state.lagging.get(&key) {
            tracing::info!(
                topic,
                partition,
                waited_ms = now_ms.saturating_sub(*since),
                "the log read to recover producer state caught up"
            );
        }
        state.lagging.remove(&key);
        state
            .partitions
            .retain(|(t, p, _), _| !(*p == partition && t == topic));
        let mut order: Vec<(usize, i64)> = rebuilt.iter().map(|(id, (_, at))| (*at, *id)).collect();
        order.sort_unstable();
        let keep = order.len().min(self.max_entries);
        let skip = order.len() - keep;
        for (_, id) in order.into_iter().skip(skip) {
            let Some((entry, _)) = rebuilt.remove(&id) else {
                continue;
            };
            make_room(
                &mut state.partitions,
                self.max_entries,
                |e| e.last_used_ms,
                |t| self.expired(t, now_ms),
            );
            state
                .partitions
                .insert((topic.to_string(), partition, id), entry);
        }
        state.leadership.recovered.insert(key);
        Installed::Kept(keep)
    }

    /// Makes `topic`'s `partition` ready for a check: confirms this gateway leads it and,
    /// the first time since it started leading it, rebuilds its producers' state from
    /// the last `window` bytes of the log (within `timeout`). The caller holds the
    /// partition's stripe lock, so no batch of the partition is checked meanwhile.
    ///
    /// A read that lags batches confirmed here is not installed: the log is read again
    /// after a pause (10 ms, doubling up to 500 ms) within `timeout`, and on the next
    /// batch after that, until it catches up or the lag wait has passed (then it is
    /// installed as it is).
    ///
    /// Every failure is `NOT_LEADER_OR_FOLLOWER`: retriable, and it tells the producer
    /// that nothing was written (a timeout would be taken as "maybe written"), as Kafka
    /// answers while a partition's leadership is still being loaded; the client
    /// refreshes its metadata and retries.
    pub(crate) async fn ensure_recovered(
        &self,
        log: &dyn LogStore,
        membership: &dyn Membership,
        topic: &str,
        partition: i32,
        window: usize,
        timeout: Duration,
    ) -> Result<(), (ErrorCode, Option<String>)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let refused = |why: String| {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
            debug!(topic, partition, why = %why, "producer state not recovered");
            Err((ErrorCode::NOT_LEADER_OR_FOLLOWER, Some(why)))
        };
        let mut pause = LAG_PAUSE_MIN;
        loop {
            let version = match self.readiness(membership, topic, partition) {
                Ok(Readiness::Ready) => return Ok(()),
                Ok(Readiness::Recover(version)) => version,
                Err(code) => return Err((code, None)),
            };
            let read = tokio::time::timeout_at(deadline, async {
                // The semaphore is never closed, so a permit always comes (Err is
                // impossible).
                let _permit = self.recoveries.acquire().await;
                recovery::read_tail(log, topic, partition, window).await
            })
            .await;
            let tail = match read {
                Ok(Ok(tail)) => tail,
                Ok(Err(e)) => {
                    return refused(format!("reading the partition's tail failed: {e}"));
                }
                Err(_) => return refused("reading the partition's tail timed out".into()),
            };
            self.stats
                .bytes
                .fetch_add(tail.bytes as u64, Ordering::Relaxed);
            match self.install(
                topic,
                partition,
                version,
                &tail.batches,
                crate::broker::now_ms(),
            ) {
                Installed::Kept(producers) => {
                    self.stats.recoveries.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .producers
                        .fetch_add(producers as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Installed::ViewChanged => {
                    return refused("the gateways' view changed during the recovery".into());
                }
                Installed::Behind => {
                    if tokio::time::Instant::now() + pause >= deadline {
                        return refused(
                            "the partition's log does not show batches confirmed before; \
                             it is read again on the next batch"
                                .into(),
                        );
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LAG_PAUSE_MAX);
                }
            }
        }
    }

    /// Entries held: (partition states, issued ids).
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        self.state
            .lock()
            .map(|s| (s.partitions.len(), s.issued.len()))
            .unwrap_or_default()
    }
}

/// Takes `locks[s]` with `take` for each of `stripes`, in index order and each once.
async fn in_order<'a, L, G, F>(
    locks: &'a [L],
    mut stripes: Vec<usize>,
    take: impl Fn(&'a L) -> F,
) -> Vec<G>
where
    F: std::future::Future<Output = G>,
{
    stripes.sort_unstable();
    stripes.dedup();
    let mut guards = Vec::with_capacity(stripes.len());
    for s in stripes {
        if let Some(lock) = locks.get(s) {
            guards.push(take(lock).await);
        }
    }
    guards
}

/// Makes room for one more entry in a table capped at `max`: drops the expired entries,
/// then, if still full, the least recently used hundredth (so a full table pays one scan
/// per hundredth of its size, not one per insert).
fn make_room<K: Eq + Hash, V>(
    map: &mut HashMap<K, V>,
    max: usize,
    last_used: impl Fn(&V) -> i64,
    expired: impl Fn(i64) -> bool,
) {
    if map.len() < max {
        return;
    }
    map.retain(|_, v| !expired(last_used(v)));
    if map.len() < max {
        return;
    }
    let drop = (max / 100).max(1);
    let mut times: Vec<i64> = map.values().map(&last_used).collect();
    let cut = drop.min(times.len()) - 1;
    let (_, cutoff, _) = times.select_nth_unstable(cut);
    let cutoff = *cutoff;
    // Entries used at the cutoff time itself go only as far as needed, so a table whose
    // entries share one timestamp (a recovery inserts many at once) loses a hundredth,
    // not everything.
    let older = times.iter().filter(|t| **t < cutoff).count();
    let mut at_cutoff = drop.saturating_sub(older);
    map.retain(|_, v| {
        let t = last_used(v);
        if t < cutoff {
            false
        } else if t == cutoff && at_cutoff > 0 {
            at_cutoff -= 1;
            false
        } else {
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn producers() -> Producers {
        Producers::new(3, DAY, 100_000)
    }

    fn b(first_seq: i32, records: i32, epoch: i16) -> BatchId {
        BatchId {
            producer_id: 7,
            epoch,
            first_seq,
            records,
        }
    }

    #[test]
    fn retries_are_duplicates_and_gaps_are_refused() {
        let p = producers();
        assert_eq!(p.check("t", 0, b(0, 3, 0), 0), Ok(Verdict::Append));
        p.record("t", 0, b(0, 3, 0), 100, 0);
        assert_eq!(p.check("t", 0, b(0, 3, 0), 0), Ok(Verdict::Duplicate(100)));
        assert_eq!(
            p.check("t", 0, b(4, 1, 0), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(3, 2, 0), 0), Ok(Verdict::Append));
        p.record("t", 0, b(3, 2, 0), 103, 0);
        // Another partition and a non-idempotent batch are independent.
        assert_eq!(p.check("t", 1, b(9, 1, 0), 0), Ok(Verdict::Append));
        let plain = BatchId {
            producer_id: -1,
            ..b(9, 1, 0)
        };
        assert_eq!(p.check("t", 0, plain, 0), Ok(Verdict::Append));
    }

    fn in_flight(v: Result<Verdict, ErrorCode>) -> InFlight {
        match v {
            Ok(Verdict::InFlight(w)) => w,
            other => panic!("expected a batch in flight, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn batches_in_flight_are_checked_against_and_recorded_in_order() {
        let p = producers();
        p.record("t", 0, b(0, 2, 0), 10, 0);
        let first = p.begin("t", 0, b(2, 3, 0), 0).unwrap();
        // The next batch follows the one in flight, not the last recorded one.
        assert_eq!(
            p.check("t", 0, b(2, 1, 0), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(5, 1, 0), 0), Ok(Verdict::Append));
        let second = p.begin("t", 0, b(5, 1, 0), 0).unwrap();
        // A retry of a batch in flight waits for it; recorded ones are still answered.
        let retry = in_flight(p.check("t", 0, b(2, 3, 0), 0));
        assert_eq!(p.check("t", 0, b(0, 2, 0), 0), Ok(Verdict::Duplicate(10)));
        // Confirmed out of order: the later one waits for the earlier to be recorded,
        // and is answered meanwhile from its place in flight.
        second.landed(15, 0);
        assert_eq!(p.check("t", 0, b(5, 1, 0), 0), Ok(Verdict::Duplicate(15)));
        assert_eq!(p.check("t", 0, b(6, 1, 0), 0), Ok(Verdict::Append));
        first.landed(12, 0);
        assert_eq!(retry.outcome().await, Ok(12));
        assert_eq!(p.check("t", 0, b(2, 3, 0), 0), Ok(Verdict::Duplicate(12)));
        assert_eq!(p.check("t", 0, b(5, 1, 0), 0), Ok(Verdict::Duplicate(15)));
        assert_eq!(p.check("t", 0, b(6, 1, 0), 0), Ok(Verdict::Append));
    }

    #[tokio::test]
    async fn a_failed_batch_in_flight_takes_the_later_ones_with_it() {
        let p = producers();
        let membership =
            kafka_store::cluster::ManualMembership::new(members(&[1])[0].clone(), members(&[1]));
        recover(&p, &membership, &[(7, 0, 0, 1, 0)]);
        let first = p.begin("t", 0, b(1, 1, 0), 0).unwrap();
        let second = p.begin("t", 0, b(2, 1, 0), 0).unwrap();
        let retry = in_flight(p.check("t", 0, b(2, 1, 0), 0));
        first.failed(ErrorCode::NOT_ENOUGH_REPLICAS);
        assert_eq!(retry.outcome().await, Err(ErrorCode::NOT_ENOUGH_REPLICAS));
        // The producer resends both, in order, from the failed one.
        assert_eq!(
            p.check("t", 0, b(2, 1, 0), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(1, 1, 0), 0), Ok(Verdict::Append));
        // A failed append may still land: the partition is read from the log next.
        assert!(matches!(
            p.readiness(&membership, "t", 0),
            Ok(Readiness::Recover(_))
        ));
        // The later one's own outcome changes nothing any more.
        second.landed(2, 0);
        assert_eq!(p.check("t", 0, b(1, 1, 0), 0), Ok(Verdict::Append));
        // Dropped unsettled (its request cancelled): failed, outcome unknown.
        let dropped = p.begin("t", 0, b(1, 1, 0), 0).unwrap();
        let retry = in_flight(p.check("t", 0, b(1, 1, 0), 0));
        drop(dropped);
        assert_eq!(retry.outcome().await, Err(ErrorCode::REQUEST_TIMED_OUT));
        assert_eq!(p.check("t", 0, b(1, 1, 0), 0), Ok(Verdict::Append));
    }

    #[test]
    fn an_epoch_bumped_in_flight_is_the_one_checked_against() {
        let p = producers();
        let old = p.begin("t", 0, b(0, 5, 0), 0).unwrap();
        // librdkafka bumps its own epoch after a timeout and starts again from 0.
        assert_eq!(p.check("t", 0, b(0, 1, 1), 0), Ok(Verdict::Append));
        let new = p.begin("t", 0, b(0, 1, 1), 0).unwrap();
        assert_eq!(p.check("t", 0, b(1, 1, 1), 0), Ok(Verdict::Append));
        assert_eq!(
            p.check("t", 0, b(5, 1, 0), 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        old.landed(0, 0);
        new.landed(5, 0);
        assert_eq!(p.check("t", 0, b(0, 1, 1), 0), Ok(Verdict::Duplicate(5)));
        assert_eq!(
            p.check("t", 0, b(0, 5, 0), 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(p.check("t", 0, b(1, 1, 1), 0), Ok(Verdict::Append));
    }

    #[test]
    fn epochs_fence_and_reset() {
        let p = producers();
        p.record("t", 0, b(0, 1, 2), 0, 0);
        assert_eq!(
            p.check("t", 0, b(1, 1, 1), 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(
            p.check("t", 0, b(5, 1, 3), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(0, 1, 3), 0), Ok(Verdict::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let p = producers();
        for i in 0..6 {
            p.record("t", 0, b(i, 1, 0), i64::from(i), 0);
        }
        assert_eq!(
            p.check("t", 0, b(0, 1, 0), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(1, 1, 0), 0), Ok(Verdict::Duplicate(1)));
        assert_eq!(p.check("t", 0, b(6, 1, 0), 0), Ok(Verdict::Append));
    }

    #[test]
    fn sequences_wrap() {
        let p = producers();
        p.record("t", 0, b(i32::MAX - 1, 2, 0), 10, 0);
        assert_eq!(p.check("t", 0, b(0, 1, 0), 0), Ok(Verdict::Append));
    }

    #[test]
    fn ids_are_random_within_the_instance_range() {
        let p = producers();
        let (a, ea) = p.allocate(0).unwrap();
        let (b, _) = p.allocate(0).unwrap();
        assert_eq!(ea, 0);
        assert_eq!(a >> ID_BITS, 3);
        assert_eq!(b >> ID_BITS, 3);
        assert_ne!(a, b);
        assert_ne!(b, a + 1, "ids must not be sequential");
    }

    #[test]
    fn an_epoch_bump_needs_the_current_epoch() {
        let p = producers();
        let (id, _) = p.allocate(0).unwrap();
        assert_eq!(p.init(id, 0, 1), Some((id, 1)));
        // The old epoch, or one never handed out: a fresh id, the owner untouched.
        for wrong in [0, 5] {
            let (other, epoch) = p.init(id, wrong, 2).unwrap();
            assert_ne!(other, id);
            assert_eq!(epoch, 0);
        }
        assert_eq!(p.init(id, 1, 3), Some((id, 2)));
        // An id never handed out is not bumped either.
        let (fresh, epoch) = p.init(12345, 0, 4).unwrap();
        assert_ne!(fresh, 12345);
        assert_eq!(epoch, 0);
    }

    #[test]
    fn a_producer_may_bump_its_own_epoch() {
        // librdkafka's idempotent producer bumps its epoch itself after a timeout, with
        // no InitProducerId: the new epoch starts at sequence 0.
        let p = producers();
        let (id, _) = p.allocate(0).unwrap();
        let at = |epoch, first_seq| BatchId {
            producer_id: id,
            epoch,
            first_seq,
            records: 1,
        };
        assert_eq!(p.check("t", 0, at(0, 0), 0), Ok(Verdict::Append));
        p.record("t", 0, at(0, 0), 0, 0);
        assert_eq!(
            p.check("t", 0, at(1, 1), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, at(1, 0), 0), Ok(Verdict::Append));
        p.record("t", 0, at(1, 0), 1, 0);
        assert_eq!(
            p.check("t", 0, at(0, 1), 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        // Its KIP-360 bump then starts from the epoch it reached.
        assert_eq!(p.init(id, 1, 1), Some((id, 2)));
    }

    #[test]
    fn state_expires_and_is_capped() {
        let p = Producers::new(0, Duration::from_millis(1000), 200);
        p.record("t", 0, b(0, 1, 0), 0, 0);
        assert_eq!(p.check("t", 0, b(0, 1, 0), 500), Ok(Verdict::Duplicate(0)));
        // Past the expiration the producer is unknown: any sequence is accepted.
        assert_eq!(p.check("t", 0, b(9, 1, 0), 2000), Ok(Verdict::Append));
        for i in 0..1000 {
            p.record("t", i, b(0, 1, 0), 0, 10_000 + i64::from(i));
            p.allocate(10_000).unwrap();
        }
        let (parts, issued) = p.len();
        assert!(parts <= 200, "{parts}");
        assert!(issued <= 200, "{issued}");
        // The most recent stays.
        assert_eq!(
            p.check("t", 999, b(0, 1, 0), 11_000),
            Ok(Verdict::Duplicate(0))
        );
    }

    fn tail(batches: &[(i64, i16, i32, i32, i64)]) -> Vec<TailBatch> {
        batches
            .iter()
            .map(
                |&(producer_id, epoch, first_seq, records, base_offset)| TailBatch {
                    base_offset,
                    marker: false,
                    id: BatchId {
                        producer_id,
                        epoch,
                        first_seq,
                        records,
                    },
                },
            )
            .collect()
    }

    fn members(ids: &[i32]) -> Vec<kafka_store::cluster::Member> {
        ids.iter()
            .map(|&node_id| kafka_store::cluster::Member {
                node_id,
                epoch: 1,
                listeners: Vec::new(),
            })
            .collect()
    }

    /// Marks `t`/0 ready on `m` (recovering it from `batches`).
    fn recover(p: &Producers, m: &dyn Membership, batches: &[(i64, i16, i32, i32, i64)]) {
        let Ok(Readiness::Recover(version)) = p.readiness(m, "t", 0) else {
            panic!("expected a recovery");
        };
        assert!(matches!(
            p.install("t", 0, version, &tail(batches), 0),
            Installed::Kept(_)
        ));
        assert_eq!(p.readiness(m, "t", 0), Ok(Readiness::Ready));
    }

    #[test]
    fn a_tail_behind_batches_seen_confirmed_is_read_again_until_the_lag_wait() {
        let p = producers().wait_for_lagging_reads(Duration::from_millis(1000));
        let m =
            kafka_store::cluster::ManualMembership::new(members(&[1])[0].clone(), members(&[1]));
        recover(&p, &m, &[]);
        // Producer 7's batches 0..=9 confirmed here, one record each.
        for seq in 0..10 {
            p.record("t", 0, b(seq, 1, 0), i64::from(seq), 0);
        }
        // A failure makes the partition read again; the read shows all of them.
        p.unrecover("t", 0);
        let all: Vec<_> = (0..10).map(|s| (7, 0, s, 1, i64::from(s))).collect();
        recover(&p, &m, &all);
        assert_eq!(p.stats.behind.load(Ordering::Relaxed), 0);
        // Again, with reads that lag: they show batch 5 as the last. Refused while the
        // wait lasts (counted from the first such read), and the state is kept.
        p.unrecover("t", 0);
        let Ok(Readiness::Recover(version)) = p.readiness(&m, "t", 0) else {
            panic!("expected a recovery");
        };
        let lagging = tail(&all[..6]);
        for now in [5_000, 5_600, 5_999] {
            assert_eq!(
                p.install("t", 0, version, &lagging, now),
                Installed::Behind,
                "at {now} ms"
            );
        }
        assert_eq!(p.stats.behind.load(Ordering::Relaxed), 3);
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        assert_eq!(p.check("t", 0, b(10, 1, 0), 6_000), Ok(Verdict::Append));
        // A read that caught up is installed, and ends the wait.
        assert_eq!(
            p.install("t", 0, version, &tail(&all), 6_000),
            Installed::Kept(1)
        );
        assert_eq!(p.check("t", 0, b(10, 1, 0), 6_000), Ok(Verdict::Append));
        assert_eq!(
            p.check("t", 0, b(6, 1, 0), 6_000),
            Ok(Verdict::Duplicate(6))
        );
        // A lag that outlasts the wait: taken as it is after the wait, from its first
        // read (a new wait, since the last one ended when the log caught up).
        p.unrecover("t", 0);
        let Ok(Readiness::Recover(version)) = p.readiness(&m, "t", 0) else {
            panic!("expected a recovery");
        };
        assert_eq!(
            p.install("t", 0, version, &lagging, 7_000),
            Installed::Behind
        );
        assert_eq!(p.stats.behind_accepted.load(Ordering::Relaxed), 0);
        assert_eq!(
            p.install("t", 0, version, &lagging, 8_000),
            Installed::Kept(1)
        );
        assert_eq!(p.stats.behind_accepted.load(Ordering::Relaxed), 1);
        assert_eq!(p.readiness(&m, "t", 0), Ok(Readiness::Ready));
        // Put back to what the log shows: the producer's batch 10 is now a gap.
        assert!(matches!(
            p.check("t", 0, b(10, 1, 0), 8_000),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        ));
        assert_eq!(p.check("t", 0, b(6, 1, 0), 8_000), Ok(Verdict::Append));
        // With no wait, the first read is taken as it is.
        let p = producers().wait_for_lagging_reads(Duration::ZERO);
        recover(&p, &m, &[]);
        p.record("t", 0, b(0, 1, 0), 0, 0);
        p.record("t", 0, b(1, 1, 0), 1, 0);
        p.unrecover("t", 0);
        recover(&p, &m, &all[..1]);
        assert_eq!(p.stats.behind_accepted.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_recovered_tail_gives_the_latest_epoch_and_last_five_batches() {
        let p = producers();
        let m =
            kafka_store::cluster::ManualMembership::new(members(&[1])[0].clone(), members(&[1]));
        // Producer 7: epoch 0 then 1 (the epoch 0 batches are forgotten); an epoch 0
        // batch after the bump is ignored. Producer 8: seven batches, the last five kept.
        let mut batches = vec![(7, 0, 0, 2, 0), (7, 1, 0, 1, 2), (7, 0, 2, 1, 3)];
        for i in 0..7 {
            batches.push((8, 0, i, 1, 10 + i64::from(i)));
        }
        batches.push((7, 1, 1, 3, 20));
        // An entry of this partition from before, of a producer the tail does not show:
        // dropped (`p.len()` below).
        p.record(
            "t",
            0,
            BatchId {
                producer_id: 9,
                ..b(40, 1, 1)
            },
            99,
            0,
        );
        recover(&p, &m, &batches);
        assert_eq!(p.check("t", 0, b(1, 3, 1), 0), Ok(Verdict::Duplicate(20)));
        assert_eq!(p.check("t", 0, b(0, 1, 1), 0), Ok(Verdict::Duplicate(2)));
        assert_eq!(p.check("t", 0, b(4, 1, 1), 0), Ok(Verdict::Append));
        assert_eq!(
            p.check("t", 0, b(3, 1, 0), 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        let eight = |seq| BatchId {
            producer_id: 8,
            ..b(seq, 1, 0)
        };
        assert_eq!(p.check("t", 0, eight(6), 0), Ok(Verdict::Duplicate(16)));
        assert_eq!(p.check("t", 0, eight(2), 0), Ok(Verdict::Duplicate(12)));
        assert_eq!(
            p.check("t", 0, eight(1), 0),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.len().0, 2);
    }

    #[test]
    fn leadership_changes_call_for_a_new_recovery() {
        let p = producers();
        let m =
            kafka_store::cluster::ManualMembership::new(members(&[1])[0].clone(), members(&[1]));
        recover(&p, &m, &[]);
        // A view right after the last one where this gateway still leads: still ready.
        m.set_members(members(&[1]));
        assert_eq!(p.readiness(&m, "t", 0), Ok(Readiness::Ready));
        // It leads no more: refused, and ready no more when it leads again.
        m.set_members(members(&[2]));
        assert_eq!(
            p.readiness(&m, "t", 0),
            Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
        );
        m.set_members(members(&[1]));
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        recover(&p, &m, &[]);
        // Views skipped (it may have lost and regained the partition unseen): recover.
        m.set_members(members(&[2]));
        m.set_members(members(&[1]));
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        recover(&p, &m, &[]);
        // A lapsed lease: refused, then recovered again.
        m.set_lease(false);
        assert_eq!(
            p.readiness(&m, "t", 0),
            Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
        );
        m.set_lease(true);
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        // A recovery that saw the view change meanwhile keeps nothing.
        let Ok(Readiness::Recover(version)) = p.readiness(&m, "t", 0) else {
            panic!("expected a recovery");
        };
        m.set_members(members(&[1]));
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        assert_eq!(p.install("t", 0, version, &[], 0), Installed::ViewChanged);
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
        // A deleted topic is recovered afresh.
        recover(&p, &m, &[]);
        p.forget_topic("t");
        assert!(matches!(p.readiness(&m, "t", 0), Ok(Readiness::Recover(_))));
    }

    #[test]
    fn a_recovery_keeps_the_latest_producers_within_the_cap() {
        let p = Producers::new(0, DAY, 100);
        let m =
            kafka_store::cluster::ManualMembership::new(members(&[1])[0].clone(), members(&[1]));
        let batches: Vec<_> = (0..1000).map(|i| (i, 0, 0, 1, i)).collect();
        recover(&p, &m, &batches);
        assert!(p.len().0 <= 100, "{:?}", p.len());
        let id = |producer_id| BatchId {
            producer_id,
            ..b(0, 1, 0)
        };
        assert_eq!(p.check("t", 0, id(999), 0), Ok(Verdict::Duplicate(999)));
        assert_eq!(p.check("t", 0, id(900), 0), Ok(Verdict::Duplicate(900)));
        // Unknown: accepted at any sequence.
        assert_eq!(
            p.check(
                "t",
                0,
                BatchId {
                    first_seq: 5,
                    ..id(0)
                },
                0
            ),
            Ok(Verdict::Append)
        );
        // Making room in a table whose entries share one time drops a hundredth only.
        p.record("t", 1, b(0, 1, 0), 0, 0);
        assert!(p.len().0 >= 99, "{:?}", p.len());
    }

    #[tokio::test]
    async fn stripes_are_taken_in_order_once() {
        let p = producers();
        let s = p.stripe("t", 0);
        let guards = p.lock(vec![s, s, p.stripe("t", 1)]).await;
        assert!(!guards.is_empty() && guards.len() <= 2);
        assert!(p.stripes[s].try_read().is_err());
        drop(guards);
        assert!(p.stripes[s].try_write().is_ok());
    }

    #[tokio::test]
    async fn appends_share_a_partition_and_a_recovery_waits_for_them() {
        let p = producers();
        let s = p.stripe("t", 0);
        let (a, b) = (p.producer_stripe("t", 0, 1), p.producer_stripe("t", 0, 2));
        let first = (
            p.lock_producers(vec![a]).await,
            p.lock_shared(vec![s]).await,
        );
        // Another producer of the same partition gets in beside it...
        let second = tokio::time::timeout(Duration::from_secs(1), async {
            (
                p.lock_producers(vec![b]).await,
                p.lock_shared(vec![s]).await,
            )
        })
        .await;
        assert!(second.is_ok() || a == b);
        // ... the same producer does not ...
        assert!(p.producer_stripes[a].try_lock().is_err());
        // ... and neither does a recovery until both are done.
        assert!(p.stripes[s].try_write().is_err());
        drop((first, second));
        assert!(p.stripes[s].try_write().is_ok());
    }
}
