//! The embedded in-memory store: its size bounds, how often retention runs, and the log
//! cleaner's budget (`log_cleaner_*`, Kafka's `log.cleaner.*` broker settings).
//!
//! `MemoryStoreConfig` carries no checks of its own, so the rules are here, once.

use super::values::{duration_ms, parsed, parsed_opt};
use super::{ConfigError, Names};
use kafka_broker::store::memory::{CleanerConfig, MemoryStoreConfig};
use serde::Deserialize;
use std::time::Duration;

/// Longest retention check interval accepted, in milliseconds (7 days).
const MAX_INTERVAL_MS: u64 = 7 * 24 * 3600 * 1000;

/// Smallest `log_cleaner_dedupe_buffer_size` accepted: room for a few dozen keys.
const MIN_DEDUPE_BUFFER_BYTES: usize = 1024;

/// The embedded store settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    memory_max_total_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    memory_max_topics: usize,
    #[serde(deserialize_with = "parsed")]
    memory_retention_check_interval_ms: u64,
    #[serde(deserialize_with = "parsed")]
    log_cleaner_enable: bool,
    #[serde(deserialize_with = "parsed")]
    log_cleaner_backoff_ms: u64,
    #[serde(deserialize_with = "parsed_opt")]
    log_cleaner_io_max_bytes_per_second: Option<u64>,
    #[serde(deserialize_with = "parsed")]
    log_cleaner_dedupe_buffer_size: usize,
}

impl Default for Raw {
    fn default() -> Self {
        let memory = MemoryStoreConfig::default();
        Raw {
            memory_max_total_bytes: memory.max_total_bytes,
            memory_max_topics: memory.max_topics,
            memory_retention_check_interval_ms: duration_ms(memory.retention_check_interval),
            log_cleaner_enable: memory.cleaner.enable,
            log_cleaner_backoff_ms: duration_ms(memory.cleaner.backoff),
            log_cleaner_io_max_bytes_per_second: memory.cleaner.io_max_bytes_per_second,
            log_cleaner_dedupe_buffer_size: memory.cleaner.dedupe_buffer_size,
        }
    }
}

impl Raw {
    /// The store's config, once its bounds are checked.
    pub(super) fn validate(self, names: &Names<'_>) -> Result<MemoryStoreConfig, ConfigError> {
        for (key, value) in [
            ("memory_max_total_bytes", self.memory_max_total_bytes as u64),
            ("memory_max_topics", self.memory_max_topics as u64),
            (
                "memory_retention_check_interval_ms",
                self.memory_retention_check_interval_ms,
            ),
            ("log_cleaner_backoff_ms", self.log_cleaner_backoff_ms),
            (
                "log_cleaner_io_max_bytes_per_second",
                self.log_cleaner_io_max_bytes_per_second.unwrap_or(1),
            ),
        ] {
            if value == 0 {
                return Err(names.invalid(key, "must be at least 1"));
            }
        }
        if self.memory_retention_check_interval_ms > MAX_INTERVAL_MS {
            return Err(names.invalid(
                "memory_retention_check_interval_ms",
                "must be at most 604800000 (7 days)",
            ));
        }
        if self.log_cleaner_backoff_ms > MAX_INTERVAL_MS {
            return Err(names.invalid(
                "log_cleaner_backoff_ms",
                "must be at most 604800000 (7 days)",
            ));
        }
        if self.log_cleaner_dedupe_buffer_size < MIN_DEDUPE_BUFFER_BYTES {
            return Err(names.invalid("log_cleaner_dedupe_buffer_size", "must be at least 1024"));
        }
        Ok(MemoryStoreConfig {
            max_topics: self.memory_max_topics,
            max_total_bytes: self.memory_max_total_bytes,
            retention_check_interval: Duration::from_millis(
                self.memory_retention_check_interval_ms,
            ),
            cleaner: CleanerConfig {
                enable: self.log_cleaner_enable,
                backoff: Duration::from_millis(self.log_cleaner_backoff_ms),
                io_max_bytes_per_second: self.log_cleaner_io_max_bytes_per_second,
                dedupe_buffer_size: self.log_cleaner_dedupe_buffer_size,
            },
        })
    }
}
