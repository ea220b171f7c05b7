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
//! the partition's lock ([`Producers::lock`]) from the check until the append is recorded.
//! The locks are a fixed set of stripes hashed by topic and partition, taken in index
//! order, so a request naming many partitions cannot deadlock with another.
//!
//! Producer ids are random 48-bit numbers below the gateway's instance id (the high 16
//! bits, so gateways sharing a store never collide): a client cannot guess another
//! producer's id to spoof its sequences. The gateway remembers the ids it handed out
//! with their current epoch. InitProducerId with an id and epoch (KIP-360) bumps the
//! epoch only when both match what the gateway handed out; anything else gets a fresh
//! id, which is what Kafka answers every non-transactional InitProducerId, so a client
//! can never fence another producer. A batch whose epoch is above the one the gateway
//! handed out for that id is refused with `INVALID_PRODUCER_EPOCH`.
//!
//! A producer the gateway has no state for (first write, a restart, another gateway's
//! id, or state expired or evicted) is accepted at any sequence, as Kafka does since
//! KIP-360: producers survive a gateway restart. State expires after
//! `producer.id.expiration.ms` without a write, and each table is capped: when full, the
//! expired entries go first, then the least recently used hundredth.

use kafka_protocol::ErrorCode;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::time::Duration;

const CACHED_BATCHES: usize = 5;
/// Lock stripes for the check-and-append step.
const STRIPES: usize = 256;
/// Bits of a producer id below the instance id.
const ID_BITS: u32 = 48;

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
    last_used_ms: i64,
}

/// A producer id this gateway handed out.
#[derive(Debug, Clone, Copy)]
struct Issued {
    epoch: i16,
    last_used_ms: i64,
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Append it.
    Append,
    /// Already appended at this base offset: answer success without appending.
    Duplicate(i64),
}

type Key = (String, i32, i64);

#[derive(Debug, Default)]
struct State {
    partitions: HashMap<Key, Entry>,
    issued: HashMap<i64, Issued>,
}

/// Producer ids handed out and the producer state of every partition.
#[derive(Debug)]
pub(crate) struct Producers {
    state: Mutex<State>,
    stripes: Box<[tokio::sync::Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
    /// The instance id, shifted into the high bits.
    base: i64,
    expiration_ms: i64,
    max_entries: usize,
}

impl Producers {
    /// State for the gateway `instance_id`, expiring after `expiration` without a write,
    /// with at most `max_entries` entries per table.
    pub(crate) fn new(instance_id: u16, expiration: Duration, max_entries: usize) -> Self {
        Producers {
            state: Mutex::new(State::default()),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            base: i64::from(instance_id & 0x7fff) << ID_BITS,
            expiration_ms: i64::try_from(expiration.as_millis()).unwrap_or(i64::MAX),
            max_entries: max_entries.max(1),
        }
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

    /// Takes the given stripes' locks in index order (so two requests never wait on
    /// each other in a cycle); the check and the append of those partitions happen
    /// under them.
    pub(crate) async fn lock(
        &self,
        mut stripes: Vec<usize>,
    ) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            if let Some(m) = self.stripes.get(s) {
                guards.push(m.lock().await);
            }
        }
        guards
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
        if let Some(issued) = state.issued.get(&b.producer_id)
            && !self.expired(issued.last_used_ms, now_ms)
            && b.epoch > issued.epoch
        {
            // An epoch this gateway never handed out for its own id.
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        let Some(e) = state
            .partitions
            .get(&(topic.to_string(), partition, b.producer_id))
            .filter(|e| !self.expired(e.last_used_ms, now_ms))
        else {
            return Ok(Verdict::Append);
        };
        if b.epoch < e.epoch {
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        if b.epoch > e.epoch {
            return if b.first_seq == 0 {
                Ok(Verdict::Append)
            } else {
                Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
            };
        }
        if let Some(&(_, _, offset)) = e
            .recent
            .iter()
            .find(|(first, last, _)| *first == b.first_seq && *last == b.last_seq())
        {
            return Ok(Verdict::Duplicate(offset));
        }
        let expected =
            e.recent.back().map_or(
                b.first_seq,
                |(_, last, _)| if *last == i32::MAX { 0 } else { last + 1 },
            );
        if b.first_seq != expected {
            return Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
        }
        Ok(Verdict::Append)
    }

    /// Records an appended batch.
    pub(crate) fn record(
        &self,
        topic: &str,
        partition: i32,
        b: BatchId,
        base_offset: i64,
        now_ms: i64,
    ) {
        if !b.idempotent() {
            return;
        }
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let state = &mut *guard;
        if let Some(issued) = state.issued.get_mut(&b.producer_id) {
            issued.last_used_ms = now_ms;
        }
        let key = (topic.to_string(), partition, b.producer_id);
        if !state.partitions.contains_key(&key) {
            make_room(
                &mut state.partitions,
                self.max_entries,
                |e| e.last_used_ms,
                |t| self.expired(t, now_ms),
            );
        }
        let e = state.partitions.entry(key).or_insert_with(|| Entry {
            epoch: b.epoch,
            recent: VecDeque::with_capacity(CACHED_BATCHES),
            last_used_ms: now_ms,
        });
        if b.epoch != e.epoch || self.expired(e.last_used_ms, now_ms) {
            e.epoch = b.epoch;
            e.recent.clear();
        }
        if e.recent.len() == CACHED_BATCHES {
            e.recent.pop_front();
        }
        e.recent.push_back((b.first_seq, b.last_seq(), base_offset));
        e.last_used_ms = now_ms;
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
    map.retain(|_, v| last_used(v) > cutoff);
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
    fn a_batch_cannot_claim_an_epoch_never_handed_out() {
        let p = producers();
        let (id, _) = p.allocate(0).unwrap();
        let forged = BatchId {
            producer_id: id,
            epoch: 1,
            first_seq: 0,
            records: 1,
        };
        assert_eq!(
            p.check("t", 0, forged, 0),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        let real = BatchId { epoch: 0, ..forged };
        assert_eq!(p.check("t", 0, real, 0), Ok(Verdict::Append));
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

    #[tokio::test]
    async fn stripes_are_taken_in_order_once() {
        let p = producers();
        let s = p.stripe("t", 0);
        let guards = p.lock(vec![s, s, p.stripe("t", 1)]).await;
        assert!(!guards.is_empty() && guards.len() <= 2);
        assert!(p.stripes[s].try_lock().is_err());
        drop(guards);
        assert!(p.stripes[s].try_lock().is_ok());
    }
}
