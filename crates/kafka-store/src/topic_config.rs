//! Per-topic settings: the typed values the gateway acts on, and every setting named on
//! the topic explicitly, as Kafka names it.
//!
//! A [`TopicConfig`] is built from the broker's defaults and the topic's overrides
//! ([`TopicConfig::from_overrides`]) and changed one name at a time
//! ([`TopicConfig::set`]). The overrides map is what a store keeps durably; the typed
//! fields are derived from it and from the defaults, so restoring a topic is
//! `from_overrides(defaults, stored)`.

use std::collections::BTreeMap;

/// `cleanup.policy`: what happens to old records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// `delete`: records are removed by `retention.ms` / `retention.bytes`.
    #[default]
    Delete,
    /// `compact`: only the latest record of each key is kept.
    Compact,
    /// `compact,delete`: both.
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether superseded records of a key are removed.
    pub fn compacts(self) -> bool {
        matches!(self, Self::Compact | Self::CompactDelete)
    }

    /// Whether retention by time and size applies.
    pub fn deletes(self) -> bool {
        matches!(self, Self::Delete | Self::CompactDelete)
    }

    /// The value as Kafka writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Compact => "compact",
            Self::CompactDelete => "compact,delete",
        }
    }
}

/// `compression.type`: the codec batches are stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionType {
    /// `producer`: as the producer sent them.
    #[default]
    Producer,
    /// `uncompressed`.
    Uncompressed,
    /// `gzip`.
    Gzip,
    /// `snappy`.
    Snappy,
    /// `lz4`.
    Lz4,
    /// `zstd`.
    Zstd,
}

impl CompressionType {
    /// The value as Kafka writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Producer => "producer",
            Self::Uncompressed => "uncompressed",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageTimestampType {
    /// `CreateTime`: the producer's timestamps are kept.
    #[default]
    CreateTime,
    /// `LogAppendTime`: the store's clock at append replaces them.
    LogAppendTime,
}

impl MessageTimestampType {
    /// The value as Kafka writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateTime => "CreateTime",
            Self::LogAppendTime => "LogAppendTime",
        }
    }
}

/// A setting refused: unknown name, wrong type, out of range, not an allowed value.
/// Answered to clients as `INVALID_CONFIG` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A topic's settings.
///
/// The typed fields are the effective values (the topic's override, else the broker's
/// default); `overrides` holds every setting named on the topic, by Kafka name, as
/// normalised text, including those the gateway stores without acting on them.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// `retention.ms`: records older than this are deleted; -1 keeps them forever.
    pub retention_ms: i64,
    /// `retention.bytes`: per-partition size cap; -1 means no cap.
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest record batch accepted for the topic.
    pub max_message_bytes: i32,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `compression.type`.
    pub compression_type: CompressionType,
    /// `message.timestamp.type`.
    pub message_timestamp_type: MessageTimestampType,
    /// `min.compaction.lag.ms`: records younger than this are never compacted away.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a record older than this is eligible for compaction even
    /// when the dirty ratio is below `min.cleanable.dirty.ratio`.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone stays readable once compaction
    /// could remove it.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of not-yet-compacted bytes that triggers
    /// compaction.
    pub min_cleanable_dirty_ratio: f64,
    /// `segment.bytes`: where a store has segments, their size.
    pub segment_bytes: i32,
    /// `segment.ms`: where a store has segments, how often one is rolled.
    pub segment_ms: i64,
    /// `message.timestamp.before.max.ms`: how far in the past a CreateTime timestamp may
    /// be, relative to the broker's clock, before the batch is refused.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future it may be.
    pub message_timestamp_after_max_ms: i64,
    /// Every setting named on the topic, by Kafka name, as normalised text.
    pub overrides: BTreeMap<String, String>,
}

impl Eq for TopicConfig {}

impl TopicConfig {
    /// Kafka's defaults: 7 days, unbounded size, 1 MiB batches (1048588 bytes), delete
    /// policy, the producer's compression, CreateTime.
    pub const KAFKA_DEFAULT: TopicConfig = TopicConfig {
        retention_ms: 604_800_000,
        retention_bytes: -1,
        max_message_bytes: 1_048_588,
        cleanup_policy: CleanupPolicy::Delete,
        compression_type: CompressionType::Producer,
        message_timestamp_type: MessageTimestampType::CreateTime,
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: i64::MAX,
        delete_retention_ms: 86_400_000,
        min_cleanable_dirty_ratio: 0.5,
        segment_bytes: 1_073_741_824,
        segment_ms: 604_800_000,
        message_timestamp_before_max_ms: i64::MAX,
        message_timestamp_after_max_ms: 3_600_000,
        overrides: BTreeMap::new(),
    };

    /// `defaults` with `overrides` applied; fails on the first refused setting.
    pub fn from_overrides(
        defaults: &TopicConfig,
        overrides: &BTreeMap<String, String>,
    ) -> Result<TopicConfig, ConfigError> {
        let mut config = defaults.clone();
        config.overrides.clear();
        for (name, value) in overrides {
            config.set(defaults, name, Some(value))?;
        }
        Ok(config)
    }

    /// Sets `name` to `value` (validated as Kafka validates it), or with `None` removes
    /// the override and returns the setting to its value in `defaults`.
    pub fn set(
        &mut self,
        defaults: &TopicConfig,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), ConfigError> {
        let Some(raw) = value else {
            self.reset(defaults, name)?;
            self.overrides.remove(name);
            return Ok(());
        };
        let v = raw.trim();
        let normalised = match name {
            "retention.ms" => {
                self.retention_ms = long(name, v, -1, i64::MAX)?;
                self.retention_ms.to_string()
            }
            "retention.bytes" => {
                self.retention_bytes = long(name, v, i64::MIN, i64::MAX)?;
                self.retention_bytes.to_string()
            }
            "max.message.bytes" => {
                self.max_message_bytes = int(name, v, 0, i32::MAX)?;
                self.max_message_bytes.to_string()
            }
            "cleanup.policy" => {
                self.cleanup_policy = cleanup_policy(v)?;
                self.cleanup_policy.as_str().to_owned()
            }
            "compression.type" => {
                self.compression_type = match v {
                    "producer" => CompressionType::Producer,
                    "uncompressed" => CompressionType::Uncompressed,
                    "gzip" => CompressionType::Gzip,
                    "snappy" => CompressionType::Snappy,
                    "lz4" => CompressionType::Lz4,
                    "zstd" => CompressionType::Zstd,
                    _ => {
                        return Err(not_one_of(
                            name,
                            v,
                            "uncompressed, zstd, lz4, snappy, gzip, producer",
                        ));
                    }
                };
                self.compression_type.as_str().to_owned()
            }
            "message.timestamp.type" => {
                self.message_timestamp_type = match v {
                    "CreateTime" => MessageTimestampType::CreateTime,
                    "LogAppendTime" => MessageTimestampType::LogAppendTime,
                    _ => return Err(not_one_of(name, v, "CreateTime, LogAppendTime")),
                };
                self.message_timestamp_type.as_str().to_owned()
            }
            "min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = long(name, v, 0, i64::MAX)?;
                self.min_compaction_lag_ms.to_string()
            }
            "max.compaction.lag.ms" => {
                self.max_compaction_lag_ms = long(name, v, 1, i64::MAX)?;
                self.max_compaction_lag_ms.to_string()
            }
            "delete.retention.ms" => {
                self.delete_retention_ms = long(name, v, 0, i64::MAX)?;
                self.delete_retention_ms.to_string()
            }
            "min.cleanable.dirty.ratio" => {
                let ratio = v
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        ConfigError(format!("{name}={v}: must be a number between 0 and 1"))
                    })?;
                self.min_cleanable_dirty_ratio = ratio;
                v.to_owned()
            }
            "segment.bytes" => {
                self.segment_bytes = int(name, v, 1_048_576, i32::MAX)?;
                self.segment_bytes.to_string()
            }
            "segment.ms" => {
                self.segment_ms = long(name, v, 1, i64::MAX)?;
                self.segment_ms.to_string()
            }
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = long(name, v, 0, i64::MAX)?;
                self.message_timestamp_before_max_ms.to_string()
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = long(name, v, 0, i64::MAX)?;
                self.message_timestamp_after_max_ms.to_string()
            }
            other => return Err(ConfigError(format!("{other} is not a topic config"))),
        };
        self.overrides.insert(name.to_owned(), normalised);
        Ok(())
    }

    /// Returns the typed setting `name` to its value in `defaults`.
    fn reset(&mut self, defaults: &TopicConfig, name: &str) -> Result<(), ConfigError> {
        match name {
            "retention.ms" => self.retention_ms = defaults.retention_ms,
            "retention.bytes" => self.retention_bytes = defaults.retention_bytes,
            "max.message.bytes" => self.max_message_bytes = defaults.max_message_bytes,
            "cleanup.policy" => self.cleanup_policy = defaults.cleanup_policy,
            "compression.type" => self.compression_type = defaults.compression_type,
            "message.timestamp.type" => {
                self.message_timestamp_type = defaults.message_timestamp_type;
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = defaults.min_compaction_lag_ms,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = defaults.max_compaction_lag_ms,
            "delete.retention.ms" => self.delete_retention_ms = defaults.delete_retention_ms,
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = defaults.min_cleanable_dirty_ratio;
            }
            "segment.bytes" => self.segment_bytes = defaults.segment_bytes,
            "segment.ms" => self.segment_ms = defaults.segment_ms,
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = defaults.message_timestamp_before_max_ms;
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = defaults.message_timestamp_after_max_ms;
            }
            other => return Err(ConfigError(format!("{other} is not a topic config"))),
        }
        Ok(())
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self::KAFKA_DEFAULT
    }
}

fn long(name: &str, v: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
    match v.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ConfigError(format!(
            "{name}={v}: must be an integer between {min} and {max}"
        ))),
    }
}

fn int(name: &str, v: &str, min: i32, max: i32) -> Result<i32, ConfigError> {
    match v.parse::<i32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ConfigError(format!(
            "{name}={v}: must be an integer between {min} and {max}"
        ))),
    }
}

fn not_one_of(name: &str, v: &str, allowed: &str) -> ConfigError {
    ConfigError(format!("{name}={v}: must be one of {allowed}"))
}

fn cleanup_policy(v: &str) -> Result<CleanupPolicy, ConfigError> {
    let (mut compact, mut delete) = (false, false);
    for item in v.split(',').map(str::trim) {
        match item {
            "compact" => compact = true,
            "delete" => delete = true,
            _ => {
                return Err(not_one_of("cleanup.policy", v, "a list of compact, delete"));
            }
        }
    }
    Ok(match (compact, delete) {
        (true, true) => CleanupPolicy::CompactDelete,
        (true, false) => CleanupPolicy::Compact,
        (false, true) => CleanupPolicy::Delete,
        (false, false) => return Err(not_one_of("cleanup.policy", v, "a list of compact, delete")),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn overrides_round_trip_and_reset_to_the_defaults() {
        let defaults = TopicConfig {
            retention_ms: 1000,
            ..TopicConfig::default()
        };
        let mut c = defaults.clone();
        c.set(&defaults, "cleanup.policy", Some("delete, compact"))
            .unwrap();
        c.set(&defaults, "retention.ms", Some("5")).unwrap();
        assert_eq!(c.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(c.overrides["cleanup.policy"], "compact,delete");
        let restored = TopicConfig::from_overrides(&defaults, &c.overrides).unwrap();
        assert_eq!(restored, c);
        c.set(&defaults, "retention.ms", None).unwrap();
        assert_eq!(c.retention_ms, 1000);
        assert!(!c.overrides.contains_key("retention.ms"));
        assert!(c.set(&defaults, "cleanup.policy", Some("shred")).is_err());
        assert!(c.set(&defaults, "retention.ms", Some("-2")).is_err());
        assert!(c.set(&defaults, "no.such.config", Some("1")).is_err());
    }
}
