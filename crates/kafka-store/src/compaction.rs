//! What one compaction pass keeps: the store-agnostic half of log compaction.
//!
//! A store hands the records of a partition's cleanable range, in offset order, to a
//! [`CompactionPass`] (or, when it holds them all at once, to [`retained`]) and rewrites
//! its log from the answers. Nothing here knows about batches, segments or Iggy.
//!
//! # Rules
//! - **Latest per key.** Within the range a pass covers, the record with the highest
//!   offset of each key survives and every earlier record of that key goes. Offsets never
//!   change: a removed record leaves a gap.
//! - **Lag.** The range ends at the first record younger than `min.compaction.lag.ms`
//!   (its `timestamp_ms` after `now_ms - min_compaction_lag_ms`); that record and
//!   everything after it are kept untouched, and they do not supersede anything before
//!   them (as in Kafka, only the cleanable range is deduplicated).
//! - **Tombstones.** A tombstone (null value) that is the latest of its key survives
//!   until its *delete horizon*: `timestamp_ms + max(min_compaction_lag_ms, 0) +
//!   delete_retention_ms`, measured on the record's append time as the store knows it
//!   (the log-append time, or the producer's timestamp under `CreateTime`). The tombstone
//!   becomes cleanable at `timestamp_ms + min_compaction_lag_ms` at the earliest, so a
//!   reader that starts at the log start and reaches the head within
//!   `delete.retention.ms` of that moment sees it. Kafka stamps a horizon into the batch
//!   on the first pass instead (KIP-534); deriving it from the record keeps this module
//!   stateless and gives the same lower bound.
//! - **Keyless records** cannot be produced to a compacted topic (the produce path
//!   refuses them); one found anyway (written before the policy changed, or a control
//!   record the store passes with no key) is kept.
//!
//! # Memory
//! The key map holds one entry per distinct key: a 128-bit keyed hash of the key and
//! the latest offset, not the key bytes, so its size does not depend on key sizes and a
//! store can stream records through it one batch at a time, in two phases:
//! 1. [`CompactionPass::observe`] every record of the range in offset order, until it
//!    answers `false` (the lag boundary, or the map is full);
//! 2. [`CompactionPass::keep`] for each record, in any order, while rewriting.
//!
//! # Clean and dirty sections
//! As in Kafka, a store need not observe its whole log on every pass. The records a
//! completed pass covered form the *clean section*: each key appears there at most once.
//! The next pass observes only the *dirty section* after it, then rewrites both: a clean
//! record whose key the map holds is superseded by the dirty one, a clean record whose
//! key it does not hold is still the latest of its key (only tombstones past their
//! horizon go). Observing from the log start is the same with an empty clean section.
//!
//! The map holds at most [`CompactionRules::max_keys`] entries (Kafka's
//! `log.cleaner.dedupe.buffer.size` divided by [`KEY_MAP_ENTRY_BYTES`]). A range with
//! more distinct keys is cleaned only up to the record whose key did not fit, as Kafka
//! cleans only the segments its map covers; the next pass carries on from there. The
//! hash is SipHash keyed with process-random keys, twice, so a client cannot craft two
//! keys that collide; an accidental 128-bit collision is negligible.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::TopicConfig;

/// Bytes one key-map entry costs, used to turn a byte budget into
/// [`CompactionRules::max_keys`] (hash, offset, and the hash table's own overhead).
pub const KEY_MAP_ENTRY_BYTES: usize = 40;

/// One record of the range a pass looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedRecord<'a> {
    /// Its offset (strictly increasing along the slice or stream).
    pub offset: i64,
    /// Its key; `None` for a keyless record, which is always kept.
    pub key: Option<&'a [u8]>,
    /// Whether its value is null.
    pub tombstone: bool,
    /// Its append time as the store knows it, in milliseconds since the epoch.
    pub timestamp_ms: i64,
}

/// The settings a pass applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionRules {
    /// The cleaner's clock, in milliseconds since the epoch.
    pub now_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this are not cleanable.
    pub min_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone outlives its becoming cleanable.
    pub delete_retention_ms: i64,
    /// Distinct keys one pass deduplicates at most (the key map's bound); at least 1
    /// is used.
    pub max_keys: usize,
}

impl CompactionRules {
    /// The rules of a topic at `now_ms`, with a key map of at most `dedupe_buffer_bytes`
    /// bytes (Kafka's `log.cleaner.dedupe.buffer.size`, per pass).
    pub fn for_topic(config: &TopicConfig, now_ms: i64, dedupe_buffer_bytes: usize) -> Self {
        Self {
            now_ms,
            min_compaction_lag_ms: config.min_compaction_lag_ms,
            delete_retention_ms: config.delete_retention_ms,
            max_keys: (dedupe_buffer_bytes / KEY_MAP_ENTRY_BYTES).max(1),
        }
    }

    /// Whether a record with this append time is old enough to be cleaned.
    pub fn cleanable(&self, timestamp_ms: i64) -> bool {
        timestamp_ms
            <= self
                .now_ms
                .saturating_sub(self.min_compaction_lag_ms.max(0))
    }

    /// When a tombstone appended at `timestamp_ms` may go.
    pub fn delete_horizon(&self, timestamp_ms: i64) -> i64 {
        timestamp_ms
            .saturating_add(self.min_compaction_lag_ms.max(0))
            .saturating_add(self.delete_retention_ms.max(0))
    }
}

/// One pass's key map and range; see the module documentation for the two phases.
#[derive(Debug)]
pub struct CompactionPass {
    rules: CompactionRules,
    hashers: (RandomState, RandomState),
    latest: HashMap<u128, i64>,
    /// First offset the pass does not clean; `None` while every observed record fits.
    end: Option<i64>,
    /// Records observed inside the range.
    observed: u64,
}

impl CompactionPass {
    /// An empty pass.
    pub fn new(rules: CompactionRules) -> Self {
        Self {
            rules,
            hashers: (RandomState::new(), RandomState::new()),
            latest: HashMap::new(),
            end: None,
            observed: 0,
        }
    }

    /// The rules of this pass.
    pub fn rules(&self) -> &CompactionRules {
        &self.rules
    }

    fn hash(&self, key: &[u8]) -> u128 {
        let a = self.hashers.0.hash_one(key);
        let b = self.hashers.1.hash_one(key);
        (u128::from(a) << 64) | u128::from(b)
    }

    /// Phase 1: takes the next record of the range (offset order). Returns `false` when
    /// the range ended at this record or before (too young, or its key does not fit in
    /// the map); the caller stops observing then.
    pub fn observe(&mut self, record: &KeyedRecord<'_>) -> bool {
        if self.end.is_some() {
            return false;
        }
        if !self.rules.cleanable(record.timestamp_ms) {
            self.end = Some(record.offset);
            return false;
        }
        if let Some(key) = record.key {
            let hash = self.hash(key);
            let full = self.latest.len() >= self.rules.max_keys.max(1);
            match self.latest.get_mut(&hash) {
                Some(offset) => *offset = record.offset,
                None if full => {
                    self.end = Some(record.offset);
                    return false;
                }
                None => {
                    self.latest.insert(hash, record.offset);
                }
            }
        }
        self.observed += 1;
        true
    }

    /// First offset this pass does not clean, or `None` when every observed record is
    /// inside the range (the range then ends after the last observed record).
    pub fn end_offset(&self) -> Option<i64> {
        self.end
    }

    /// Records observed inside the range.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// Distinct keys in the map.
    pub fn keys(&self) -> usize {
        self.latest.len()
    }

    /// Phase 2: whether `record` survives. Records at or after
    /// [`CompactionPass::end_offset`] are kept. A keyed record before the observed ones
    /// whose key the map does not hold belongs to the *clean section* (see the module
    /// documentation): it is kept, unless it is a tombstone past its delete horizon.
    pub fn keep(&self, record: &KeyedRecord<'_>) -> bool {
        if self.end.is_some_and(|end| record.offset >= end) {
            return true;
        }
        let Some(key) = record.key else {
            return true;
        };
        match self.latest.get(&self.hash(key)) {
            Some(&latest) if latest > record.offset => false,
            // Not in the map: the record lies in the clean section, before the records
            // the pass observed, where an earlier pass left only the latest of each key.
            // Or: the latest of its key.
            None | Some(_) => {
                !record.tombstone
                    || self.rules.now_ms < self.rules.delete_horizon(record.timestamp_ms)
            }
        }
    }
}

/// For each record of the cleanable range (offset order), whether it survives.
pub fn retained(records: &[KeyedRecord<'_>], rules: &CompactionRules) -> Vec<bool> {
    let mut pass = CompactionPass::new(*rules);
    for record in records {
        if !pass.observe(record) {
            break;
        }
    }
    records.iter().map(|r| pass.keep(r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(now_ms: i64) -> CompactionRules {
        CompactionRules {
            now_ms,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 100,
            max_keys: 1000,
        }
    }

    fn rec(
        offset: i64,
        key: &'static str,
        tombstone: bool,
        timestamp_ms: i64,
    ) -> KeyedRecord<'static> {
        KeyedRecord {
            offset,
            key: Some(key.as_bytes()),
            tombstone,
            timestamp_ms,
        }
    }

    #[test]
    fn the_latest_record_of_each_key_survives() {
        let records = [
            rec(0, "a", false, 10),
            rec(1, "b", false, 10),
            rec(3, "a", false, 11),
            rec(4, "c", false, 12),
            rec(7, "b", false, 13),
        ];
        assert_eq!(
            retained(&records, &rules(1_000)),
            [false, false, true, true, true]
        );
    }

    #[test]
    fn keyless_records_are_kept() {
        let records = [
            KeyedRecord {
                offset: 0,
                key: None,
                tombstone: false,
                timestamp_ms: 0,
            },
            KeyedRecord {
                offset: 1,
                key: None,
                tombstone: true,
                timestamp_ms: 0,
            },
        ];
        assert_eq!(retained(&records, &rules(1_000_000)), [true, true]);
    }

    #[test]
    fn records_younger_than_the_lag_and_after_them_are_untouched() {
        let mut r = rules(1_000);
        r.min_compaction_lag_ms = 500;
        let records = [
            rec(0, "a", false, 100),
            rec(1, "a", false, 400),
            // Too young: the range ends here.
            rec(2, "a", false, 600),
            // Old again, but after the boundary.
            rec(3, "a", false, 100),
        ];
        assert_eq!(retained(&records, &r), [false, true, true, true]);
        let mut pass = CompactionPass::new(r);
        assert!(pass.observe(&records[0]));
        assert!(pass.observe(&records[1]));
        assert!(!pass.observe(&records[2]));
        assert_eq!(pass.end_offset(), Some(2));
    }

    #[test]
    fn tombstones_stay_until_their_delete_horizon() {
        let mut r = rules(0);
        r.min_compaction_lag_ms = 50;
        let records = [rec(0, "a", false, 0), rec(1, "a", true, 1_000)];
        // Horizon: 1000 + 50 + 100.
        r.now_ms = 1_149;
        assert_eq!(retained(&records, &r), [false, true]);
        r.now_ms = 1_150;
        assert_eq!(retained(&records, &r), [false, false]);
    }

    #[test]
    fn a_superseded_tombstone_goes_at_once() {
        let records = [rec(0, "a", true, 990), rec(1, "a", false, 995)];
        assert_eq!(retained(&records, &rules(1_000)), [false, true]);
    }

    #[test]
    fn a_full_key_map_cleans_only_a_prefix() {
        let mut r = rules(1_000);
        r.max_keys = 2;
        let records = [
            rec(0, "a", false, 0),
            rec(1, "b", false, 0),
            rec(2, "a", false, 0),
            // Third distinct key: the pass stops here.
            rec(3, "c", false, 0),
            rec(4, "a", false, 0),
            rec(5, "c", false, 0),
        ];
        assert_eq!(
            retained(&records, &r),
            [false, true, true, true, true, true]
        );
        let mut pass = CompactionPass::new(r);
        for record in &records {
            if !pass.observe(record) {
                break;
            }
        }
        assert_eq!(pass.end_offset(), Some(3));
        assert_eq!(pass.keys(), 2);
        assert_eq!(pass.observed(), 3);
    }

    #[test]
    fn the_clean_section_is_superseded_by_the_dirty_one() {
        let mut pass = CompactionPass::new(rules(1_000));
        // Clean section (offsets 0..=2): one record per key, never observed.
        let clean = [
            rec(0, "a", false, 0),
            rec(1, "b", true, 0),
            rec(2, "c", true, 950),
        ];
        let dirty = [rec(3, "a", false, 0), rec(4, "d", false, 0)];
        for r in &dirty {
            assert!(pass.observe(r));
        }
        let kept: Vec<bool> = clean.iter().chain(&dirty).map(|r| pass.keep(r)).collect();
        // "a" superseded; "b" a tombstone past its horizon (0 + 100); "c" within it.
        assert_eq!(kept, [false, false, true, true, true]);
    }

    #[test]
    fn rules_come_from_the_topic() {
        let config = TopicConfig {
            min_compaction_lag_ms: 7,
            delete_retention_ms: 9,
            ..TopicConfig::default()
        };
        let r = CompactionRules::for_topic(&config, 100, 10 * KEY_MAP_ENTRY_BYTES);
        assert_eq!(r.max_keys, 10);
        assert_eq!(r.min_compaction_lag_ms, 7);
        assert_eq!(r.delete_retention_ms, 9);
        assert_eq!(CompactionRules::for_topic(&config, 0, 0).max_keys, 1);
        assert!(r.cleanable(93));
        assert!(!r.cleanable(94));
        assert_eq!(r.delete_horizon(1), 17);
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let r = CompactionRules {
            now_ms: i64::MIN,
            min_compaction_lag_ms: i64::MAX,
            delete_retention_ms: i64::MAX,
            max_keys: 1,
        };
        assert!(!r.cleanable(0));
        assert_eq!(r.delete_horizon(i64::MAX), i64::MAX);
        let records = [rec(0, "a", true, i64::MIN)];
        assert_eq!(retained(&records, &r), [true]);
    }
}
