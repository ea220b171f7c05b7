//! Per-topic settings: the typed values the gateway acts on, and every setting named on
//! the topic explicitly, as Kafka names it.
//!
//! A [`TopicConfig`] is built from the broker's defaults and the topic's overrides
//! ([`TopicConfig::from_overrides`]) and changed one name at a time
//! ([`TopicConfig::set`]). The overrides map is what a store keeps durably; the typed
//! fields are derived from it and from the defaults, so restoring a topic is
//! `from_overrides(defaults, stored)`.
//!
//! Which names exist, their types, ranges and defaults live in one table,
//! [`registry::TOPIC_CONFIGS`], covering every topic setting of Kafka 4.1. `set` checks a
//! value against the table and keeps its normalised text in `overrides`; only the
//! settings the gateway acts on have a typed field. Settings without one are stored and
//! reported back (DescribeConfigs) but change nothing.

use std::collections::BTreeMap;

pub mod registry;

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

/// Longest value a topic setting may have, in bytes. Every value is kept with the topic
/// (and, with the bridge, written to Iggy in the topic's metadata record), so a client
/// cannot store megabytes per setting. The longest legitimate values are the
/// `*.replication.throttled.replicas` lists, about 8 bytes per partition.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

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

    /// `defaults` with `overrides` applied; fails on the first refused setting or when
    /// the result breaks a rule between settings ([`TopicConfig::validate`]).
    pub fn from_overrides(
        defaults: &TopicConfig,
        overrides: &BTreeMap<String, String>,
    ) -> Result<TopicConfig, ConfigError> {
        let mut config = defaults.clone();
        config.overrides.clear();
        for (name, value) in overrides {
            config.set(defaults, name, Some(value))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets `name` to `value` (parsed and checked as Kafka checks it, see
    /// [`registry`]), or with `None` removes the override and returns the setting to its
    /// value in `defaults`. Any setting Kafka 4.1 defines is accepted; names it does not
    /// define are refused. Rules between settings are checked by
    /// [`TopicConfig::validate`], once all of a request's changes are made.
    pub fn set(
        &mut self,
        defaults: &TopicConfig,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), ConfigError> {
        let def = registry::lookup(name).ok_or_else(|| unknown(name))?;
        let Some(raw) = value else {
            self.reset(defaults, name);
            self.overrides.remove(name);
            return Ok(());
        };
        if raw.len() > MAX_VALUE_BYTES {
            return Err(ConfigError(format!(
                "{name}: a value of {} bytes is longer than the {MAX_VALUE_BYTES} allowed",
                raw.len()
            )));
        }
        let mut v = def.normalise(raw)?;
        self.set_typed(name, &v)?;
        if name == "cleanup.policy" {
            // One spelling per policy ("delete,compact" and "compact" "," "delete" alike).
            v = self.cleanup_policy.as_str().to_owned();
        }
        self.overrides.insert(name.to_owned(), v);
        Ok(())
    }

    /// Rules between settings, as Kafka checks them on the merged configuration:
    /// `min.compaction.lag.ms` may not exceed `max.compaction.lag.ms`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(ConfigError(format!(
                "min.compaction.lag.ms ({}) may not be larger than max.compaction.lag.ms ({})",
                self.min_compaction_lag_ms, self.max_compaction_lag_ms
            )));
        }
        Ok(())
    }

    /// The topic's value for `name` as text: its override, else the typed effective
    /// value, else Kafka's default. `None` for a name that is no topic setting.
    pub fn value_of(&self, name: &str) -> Option<String> {
        let def = registry::lookup(name)?;
        if let Some(v) = self.overrides.get(name) {
            return Some(v.clone());
        }
        Some(
            self.typed_text(name)
                .unwrap_or_else(|| def.default.to_owned()),
        )
    }

    /// Whether this configuration, used as the broker's defaults, sets `name` to
    /// something other than Kafka's default (so DescribeConfigs reports it as the
    /// broker's own setting).
    pub fn differs_from_kafka(&self, name: &str) -> bool {
        if self.overrides.contains_key(name) {
            return true;
        }
        match (
            self.typed_text(name),
            TopicConfig::KAFKA_DEFAULT.typed_text(name),
        ) {
            (Some(mine), Some(kafka)) => mine != kafka,
            _ => false,
        }
    }

    /// The typed field behind `name` as text, for the settings that have one.
    fn typed_text(&self, name: &str) -> Option<String> {
        Some(match name {
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "cleanup.policy" => self.cleanup_policy.as_str().to_owned(),
            "compression.type" => self.compression_type.as_str().to_owned(),
            "message.timestamp.type" => self.message_timestamp_type.as_str().to_owned(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.cleanable.dirty.ratio" => registry::double_text(self.min_cleanable_dirty_ratio),
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms.to_string(),
            _ => return None,
        })
    }

    /// Stores an already normalised value `v` in the typed field behind `name`, if any.
    fn set_typed(&mut self, name: &str, v: &str) -> Result<(), ConfigError> {
        match name {
            "retention.ms" => self.retention_ms = long(name, v)?,
            "retention.bytes" => self.retention_bytes = long(name, v)?,
            "max.message.bytes" => self.max_message_bytes = int(name, v)?,
            "cleanup.policy" => self.cleanup_policy = cleanup_policy(v)?,
            "compression.type" => {
                self.compression_type = match v {
                    "producer" => CompressionType::Producer,
                    "uncompressed" => CompressionType::Uncompressed,
                    "gzip" => CompressionType::Gzip,
                    "snappy" => CompressionType::Snappy,
                    "lz4" => CompressionType::Lz4,
                    "zstd" => CompressionType::Zstd,
                    _ => return Err(invalid(name, v)),
                };
            }
            "message.timestamp.type" => {
                self.message_timestamp_type = match v {
                    "CreateTime" => MessageTimestampType::CreateTime,
                    "LogAppendTime" => MessageTimestampType::LogAppendTime,
                    _ => return Err(invalid(name, v)),
                };
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(name, v)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = long(name, v)?,
            "delete.retention.ms" => self.delete_retention_ms = long(name, v)?,
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = v.parse().map_err(|_| invalid(name, v))?;
            }
            "segment.bytes" => self.segment_bytes = int(name, v)?,
            "segment.ms" => self.segment_ms = long(name, v)?,
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = long(name, v)?;
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = long(name, v)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Returns the typed setting `name` (if it has one) to its value in `defaults`.
    fn reset(&mut self, defaults: &TopicConfig, name: &str) {
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
            _ => {}
        }
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self::KAFKA_DEFAULT
    }
}

fn unknown(name: &str) -> ConfigError {
    ConfigError(format!("{name} is not a topic config"))
}

fn invalid(name: &str, v: &str) -> ConfigError {
    ConfigError(format!("{name}={v}: not a valid value"))
}

// The two parsers below read values `registry` has already checked; an error here would
// mean the table and the typed fields disagree, and is reported, not assumed away.
fn long(name: &str, v: &str) -> Result<i64, ConfigError> {
    v.parse().map_err(|_| invalid(name, v))
}

fn int(name: &str, v: &str) -> Result<i32, ConfigError> {
    v.parse().map_err(|_| invalid(name, v))
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
    use super::registry::{Check, ConfigType, TOPIC_CONFIGS};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_value_longer_than_the_bound_is_refused_before_parsing() {
        let d = TopicConfig::default();
        let mut c = d.clone();
        let pairs = (0..2000)
            .map(|p| format!("{p}:0"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(pairs.len() < MAX_VALUE_BYTES);
        c.set(&d, "leader.replication.throttled.replicas", Some(&pairs))
            .unwrap();
        let long = "compact,".repeat(MAX_VALUE_BYTES / 8 + 1);
        let e = c.set(&d, "cleanup.policy", Some(&long)).unwrap_err();
        assert!(e.0.contains("longer than"), "{e}");
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
    }

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
        assert!(c.set(&defaults, "no.such.config", None).is_err());
    }

    #[test]
    fn settings_without_a_typed_field_are_stored_and_reported() {
        let d = TopicConfig::default();
        let mut c = d.clone();
        c.set(&d, "segment.jitter.ms", Some(" 25 ")).unwrap();
        c.set(&d, "min.insync.replicas", Some("2")).unwrap();
        c.set(&d, "unclean.leader.election.enable", Some("TRUE"))
            .unwrap();
        assert_eq!(c.overrides["segment.jitter.ms"], "25");
        assert_eq!(
            c.value_of("unclean.leader.election.enable").unwrap(),
            "true"
        );
        assert_eq!(c.value_of("preallocate").unwrap(), "false");
        assert_eq!(c.value_of("retention.ms").unwrap(), "604800000");
        assert_eq!(c.value_of("message.format.version"), None);
        // Typed fields are untouched by them.
        assert_eq!(
            TopicConfig {
                overrides: BTreeMap::new(),
                ..c.clone()
            },
            d
        );
        c.set(&d, "min.insync.replicas", None).unwrap();
        assert_eq!(c.value_of("min.insync.replicas").unwrap(), "1");
    }

    #[test]
    fn kafka_4_defaults_and_removed_names() {
        let d = TopicConfig::default();
        for def in TOPIC_CONFIGS {
            assert_eq!(d.value_of(def.name).unwrap(), def.default, "{}", def.name);
            assert!(!d.differs_from_kafka(def.name));
        }
        assert_eq!(d.message_timestamp_after_max_ms, 3_600_000);
        let mut c = d.clone();
        for gone in [
            "message.format.version",
            "message.timestamp.difference.max.ms",
        ] {
            assert!(c.set(&d, gone, Some("3.0")).is_err());
        }
        assert!(
            c.set(&d, "message.downconversion.enable", Some("false"))
                .is_ok()
        );
        let gateway = TopicConfig {
            retention_ms: 1,
            ..TopicConfig::default()
        };
        assert!(gateway.differs_from_kafka("retention.ms"));
        assert!(!gateway.differs_from_kafka("retention.bytes"));
    }

    #[test]
    fn compaction_lags_must_be_ordered() {
        let d = TopicConfig::default();
        let mut c = d.clone();
        c.set(&d, "max.compaction.lag.ms", Some("100")).unwrap();
        c.set(&d, "min.compaction.lag.ms", Some("200")).unwrap();
        assert!(c.validate().is_err());
        assert!(TopicConfig::from_overrides(&d, &c.overrides).is_err());
        c.set(&d, "min.compaction.lag.ms", Some("100")).unwrap();
        assert!(c.validate().is_ok());
    }

    /// A valid value for `def`, chosen by `r` and `b`.
    fn valid_value(def: &registry::ConfigDef, r: i64, b: bool) -> String {
        let pick = |n: usize| (r.unsigned_abs() % n as u64) as usize;
        match (def.kind, def.check) {
            (ConfigType::Boolean, Check::OnlyFalse(_)) => "false".into(),
            (ConfigType::Boolean, _) => b.to_string(),
            (_, Check::Range(min, max)) => {
                let span = (i128::from(max) - i128::from(min) + 1) as u128;
                (i128::from(min) + (u128::from(r.unsigned_abs()) % span) as i128).to_string()
            }
            (ConfigType::Int, Check::Any) => (r as i32).to_string(),
            (_, Check::Any) => r.to_string(),
            (_, Check::GzipLevel) => if b { -1 } else { 1 + pick(9) as i64 }.to_string(),
            (_, Check::Between(..)) => format!("{}", pick(1001) as f64 / 1000.0),
            (_, Check::OneOf(list)) => list[pick(list.len())].into(),
            (_, Check::ListOf(list)) => match pick(3) {
                0 => list[0].into(),
                1 => list[list.len() - 1].into(),
                _ => format!("{} , {}", list[list.len() - 1], list[0]),
            },
            (_, Check::ThrottledReplicas) if b => "*".into(),
            (_, Check::ThrottledReplicas) => format!("{}:{}, {}:1", pick(8), pick(3), pick(4)),
            (kind, check) => panic!("no sample for {kind:?} {check:?}"),
        }
    }

    proptest! {
        /// Any sequence of valid sets and resets, restored from the overrides it left,
        /// gives back the same configuration.
        #[test]
        fn set_then_from_overrides_round_trips(
            steps in proptest::collection::vec(
                (0..TOPIC_CONFIGS.len(), any::<i64>(), any::<bool>(), 0..5u8), 1..40),
            retention in -1i64..10_000,
        ) {
            let defaults = TopicConfig { retention_ms: retention, ..TopicConfig::default() };
            let mut c = defaults.clone();
            for (i, r, b, reset) in steps {
                let def = &TOPIC_CONFIGS[i];
                if reset == 0 {
                    c.set(&defaults, def.name, None).unwrap();
                } else {
                    let v = valid_value(def, r, b);
                    c.set(&defaults, def.name, Some(&v)).unwrap();
                    let stored = c.overrides[def.name].clone();
                    // The stored text is itself accepted and stored unchanged.
                    prop_assert_eq!(def.normalise(&stored).unwrap(), stored);
                }
            }
            prop_assume!(c.validate().is_ok());
            let restored = TopicConfig::from_overrides(&defaults, &c.overrides).unwrap();
            prop_assert_eq!(&restored, &c);
            for def in TOPIC_CONFIGS {
                prop_assert_eq!(restored.value_of(def.name), c.value_of(def.name));
            }
        }
    }
}
