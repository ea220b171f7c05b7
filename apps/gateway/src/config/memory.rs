//! The embedded in-memory store: its size bounds and how often retention runs.
//!
//! `MemoryStoreConfig` carries no checks of its own, so the rules are here, once.

use super::values::{duration_ms, parsed};
use super::{ConfigError, Names};
use kafka_broker::store::memory::MemoryStoreConfig;
use serde::Deserialize;
use std::time::Duration;

/// Longest retention check interval accepted, in milliseconds (7 days).
const MAX_INTERVAL_MS: u64 = 7 * 24 * 3600 * 1000;

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
}

impl Default for Raw {
    fn default() -> Self {
        let memory = MemoryStoreConfig::default();
        Raw {
            memory_max_total_bytes: memory.max_total_bytes,
            memory_max_topics: memory.max_topics,
            memory_retention_check_interval_ms: duration_ms(memory.retention_check_interval),
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
        Ok(MemoryStoreConfig {
            max_topics: self.memory_max_topics,
            max_total_bytes: self.memory_max_total_bytes,
            retention_check_interval: Duration::from_millis(
                self.memory_retention_check_interval_ms,
            ),
        })
    }
}
