//! Compacted topics on Iggy: the settings of the bridge's cleaner, what one pass reports,
//! and the steps a pass goes through (the implementation is `crate::bridge::compaction`).
//!
//! Iggy deletes whole segments only, and a Kafka offset is the Iggy offset of the
//! partition, so a compacted partition cannot be rewritten in place. Instead each
//! compacted partition has a *companion*: a one-partition Iggy topic in the meta stream
//! holding the survivors of the partition's cleaned prefix, each message carrying its
//! Kafka offset (message id = offset + 1). A pass:
//!
//! 1. reads Iggy's description of the partition once: high watermark `H` and the number
//!    of segments; every sealed segment then ends below `H`;
//! 2. feeds the current companion, then the partition from the previous boundary up to
//!    `H`, through `kafka_store::compaction::CompactionPass` (phase 1: the key map);
//! 3. writes the survivors of the same records into a new companion generation
//!    (phase 2), building a sparse offset index;
//! 4. switches: one record of the `topics` meta log names the new generation, its
//!    boundary `H` and index. From then on offsets below `H` are served from it;
//! 5. deletes the partition's segments that were sealed at step 1 (they hold only
//!    offsets below `H`), unless Iggy moved the partition's start meanwhile;
//! 6. deletes the previous companion generation.
//!
//! On a topic that ever held a transactional batch, a pass first reads the records once
//! more to fold the partition's transactions (`kafka_store::txn_index::TxnIndex`): the
//! cleaned section ends at the first offset of the oldest open transaction; records of
//! aborted transactions there are dropped and never supersede a committed record of
//! their key; commit and abort markers are kept.
//!
//! A crash between any two steps leaves a consistent view: before the switch the old
//! generation (or the untouched partition) is still what is served, and the new
//! companion is an orphan the next pass deletes; after it, the new generation is served
//! whether or not the segments and the old generation are gone yet. See
//! `docs/bridge.md`, "Compacted topics".

use std::time::Duration;

/// Settings of the bridge's background cleaner; names follow Kafka's broker settings.
#[derive(Clone, Debug, PartialEq)]
pub struct CleanerConfig {
    /// Kafka `log.cleaner.enable`: whether [`crate::IggyBridge::start_compaction`] runs
    /// passes at all. Default true.
    pub enable: bool,
    /// Kafka `log.cleaner.backoff.ms`: pause between two rounds over the compacted
    /// partitions this gateway leads. Default 15 s.
    pub backoff: Duration,
    /// Kafka `log.cleaner.dedupe.buffer.size`: bytes of the key map of one pass (one
    /// pass runs at a time). A partition with more distinct keys is cleaned up to the
    /// key that did not fit. Default 128 MiB.
    pub dedupe_buffer_size: usize,
    /// Kafka `log.cleaner.io.max.bytes.per.second`: message bytes a pass reads and writes
    /// per second, both counted. `None`: unthrottled (Kafka's default).
    pub io_max_bytes_per_second: Option<u64>,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            enable: true,
            backoff: Duration::from_secs(15),
            dedupe_buffer_size: 128 << 20,
            io_max_bytes_per_second: None,
        }
    }
}

/// Smallest `dedupe_buffer_size` accepted (the gateway's floor too).
pub const MIN_DEDUPE_BUFFER_SIZE: usize = 1024;

impl CleanerConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.backoff.is_zero() || self.backoff > Duration::from_secs(7 * 24 * 3600) {
            return Err("log.cleaner.backoff.ms must be within (0, 7 days]".into());
        }
        if self.dedupe_buffer_size < MIN_DEDUPE_BUFFER_SIZE {
            return Err("log.cleaner.dedupe.buffer.size must be at least 1024".into());
        }
        if self.io_max_bytes_per_second == Some(0) {
            return Err("log.cleaner.io.max.bytes.per.second must be above zero".into());
        }
        Ok(())
    }
}

/// Where a pass stops early: crash tests end a pass after a step and restart the
/// gateway to check the view.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassStep {
    /// The new companion generation is written, the switch record is not.
    CompanionWritten,
    /// The switch record is written, no segment deleted.
    Switched,
    /// The sealed segments are deleted, the previous companion is not.
    SegmentsDeleted,
}

/// What one pass over one partition did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassReport {
    /// Whether the pass ran; false when the partition was not dirty enough (or not
    /// compacted, or had nothing new).
    pub ran: bool,
    /// Dirty ratio before the pass: bytes after the previous boundary over all bytes.
    pub dirty_ratio: f64,
    /// Records of the dirty section the key map looked at.
    pub records_read: u64,
    /// Message bytes of those records (what Kafka's cleaner calls bytes cleaned).
    pub bytes_read: u64,
    /// Records written to the new companion.
    pub records_kept: u64,
    /// Records left out of the new companion (superseded, expired tombstones, expired
    /// by `retention.ms`, below the log start, aborted in a transaction).
    pub records_removed: u64,
    /// Generation switched to.
    pub generation: u64,
    /// New boundary: offsets below it are served from the companion.
    pub end: i64,
    /// End of what this pass deduplicated (the clean section): from here to `end` the
    /// companion holds every record (the active batch, records younger than
    /// `min.compaction.lag.ms`, or what did not fit the key map).
    pub cleaned_to: i64,
    /// Segments of the partition deleted.
    pub segments_deleted: u32,
    /// Iggy bytes given back: the partition's size and the previous companion's size
    /// that went, minus nothing (the new companion's size is in `companion_bytes`).
    pub reclaimed_bytes: u64,
    /// Size of the new companion in Iggy.
    pub companion_bytes: u64,
}
