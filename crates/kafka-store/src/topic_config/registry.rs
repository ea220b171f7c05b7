//! Every topic setting a Kafka 4.1 broker defines, as data: its name, type, Kafka's
//! default, the rule a value must satisfy, the broker setting that supplies the default,
//! a one-line description, and whether this gateway acts on it.
//!
//! [`TopicConfig::set`](super::TopicConfig::set) looks names up here, so a setting Kafka
//! knows is accepted even when the gateway only stores it, and a name Kafka does not know
//! (including the ones Kafka 4.0 dropped: `message.format.version`,
//! `message.timestamp.difference.max.ms`) is refused. DescribeConfigs walks the table
//! to list every setting of a topic, not only the ones named on it.
//!
//! Values are parsed the way Kafka's config parser does: surrounding spaces are ignored,
//! booleans are `true`/`false` in any case, lists are comma separated with spaces around
//! items ignored. [`ConfigDef::normalise`] returns the text stores keep.

use super::ConfigError;

/// A setting's type, numbered as DescribeConfigs v3+ reports it (`ConfigType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigType {
    /// `true` or `false`.
    Boolean = 1,
    /// Free text, possibly limited to a set of values.
    String = 2,
    /// 32-bit integer.
    Int = 3,
    /// 16-bit integer.
    Short = 4,
    /// 64-bit integer.
    Long = 5,
    /// Floating point number.
    Double = 6,
    /// Comma-separated list.
    List = 7,
    /// Java class name.
    Class = 8,
    /// Secret text, never shown.
    Password = 9,
}

impl ConfigType {
    /// The number DescribeConfigs v3+ sends.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// The name Kafka's documentation uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Boolean => "boolean",
            Self::String => "string",
            Self::Int => "int",
            Self::Short => "short",
            Self::Long => "long",
            Self::Double => "double",
            Self::List => "list",
            Self::Class => "class",
            Self::Password => "password",
        }
    }
}

/// The rule a value must satisfy beyond parsing as its type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// Any value of the type.
    Any,
    /// An integer in `min..=max` (bounds within the type's range).
    Range(i64, i64),
    /// A number in `min..=max`.
    Between(f64, f64),
    /// One of these strings, compared exactly.
    OneOf(&'static [&'static str]),
    /// A list whose every item is one of these; the gateway also refuses the empty list.
    ListOf(&'static [&'static str]),
    /// gzip's level: 1 to 9, or -1 for the codec's own default.
    GzipLevel,
    /// `*`, or a list of `partition:broker` pairs of non-negative integers.
    ThrottledReplicas,
    /// A boolean that may only be `false` here: the feature it turns on does not exist
    /// on this gateway (tiered storage).
    OnlyFalse(&'static str),
}

/// What the gateway does with a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The gateway's behaviour follows it.
    Honoured,
    /// Accepted, validated, stored and described, without changing what the gateway does
    /// (it concerns disk files, replication or tiered storage, which the gateway does
    /// not have in Kafka's form).
    Stored,
}

/// One topic setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigDef {
    /// Kafka's name.
    pub name: &'static str,
    /// Its type.
    pub kind: ConfigType,
    /// Kafka's default, as text.
    pub default: &'static str,
    /// The rule values must satisfy.
    pub check: Check,
    /// The broker settings that supply the default, highest priority first (empty when
    /// Kafka has none).
    pub broker_synonyms: &'static [&'static str],
    /// What the setting means, in one line.
    pub doc: &'static str,
    /// What the gateway does with it.
    pub effect: Effect,
}

const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const CLEANUP_POLICIES: &[&str] = &["compact", "delete"];
const I32_MAX: i64 = i32::MAX as i64;

const fn def(
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    check: Check,
    broker_synonyms: &'static [&'static str],
    effect: Effect,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        default,
        check,
        broker_synonyms,
        doc,
        effect,
    }
}

use Check::{Any, Between, GzipLevel, ListOf, OneOf, OnlyFalse, Range, ThrottledReplicas};
use ConfigType::{Boolean, Double, Int, List, Long, String as Str};
use Effect::{Honoured, Stored};

/// Every topic setting of Kafka 4.1, sorted by name.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    def(
        "cleanup.policy",
        List,
        "delete",
        ListOf(CLEANUP_POLICIES),
        &["log.cleanup.policy"],
        Honoured,
        "How old records go: `delete` drops them by age and size, `compact` keeps the latest record per key; both may be given.",
    ),
    def(
        "compression.gzip.level",
        Int,
        "-1",
        GzipLevel,
        &["compression.gzip.level"],
        Stored,
        "Level used when the topic's compression.type is gzip (-1: the codec's default).",
    ),
    def(
        "compression.lz4.level",
        Int,
        "9",
        Range(1, 17),
        &["compression.lz4.level"],
        Stored,
        "Level used when the topic's compression.type is lz4.",
    ),
    def(
        "compression.type",
        Str,
        "producer",
        OneOf(COMPRESSION_TYPES),
        &["compression.type"],
        Honoured,
        "Codec batches are stored with; `producer` keeps whatever the producer used.",
    ),
    def(
        "compression.zstd.level",
        Int,
        "3",
        Range(-131_072, 22),
        &["compression.zstd.level"],
        Stored,
        "Level used when the topic's compression.type is zstd.",
    ),
    def(
        "delete.retention.ms",
        Long,
        "86400000",
        Range(0, i64::MAX),
        &["log.cleaner.delete.retention.ms"],
        Honoured,
        "How long a tombstone stays readable on a compacted topic once compaction could drop it.",
    ),
    def(
        "file.delete.delay.ms",
        Long,
        "60000",
        Range(0, i64::MAX),
        &["log.segment.delete.delay.ms"],
        Stored,
        "Grace period before a removed segment file is deleted from disk.",
    ),
    def(
        "flush.messages",
        Long,
        "9223372036854775807",
        Range(1, i64::MAX),
        &["log.flush.interval.messages"],
        Stored,
        "Records appended between forced flushes to disk.",
    ),
    def(
        "flush.ms",
        Long,
        "9223372036854775807",
        Range(0, i64::MAX),
        &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
        Stored,
        "Longest time appended records wait before a forced flush to disk.",
    ),
    def(
        "follower.replication.throttled.replicas",
        List,
        "",
        ThrottledReplicas,
        &[],
        Stored,
        "Replicas whose follower-side replication is throttled (`*` or partition:broker pairs).",
    ),
    def(
        "index.interval.bytes",
        Int,
        "4096",
        Range(0, I32_MAX),
        &["log.index.interval.bytes"],
        Stored,
        "Bytes appended between two entries of a segment's offset index.",
    ),
    def(
        "leader.replication.throttled.replicas",
        List,
        "",
        ThrottledReplicas,
        &[],
        Stored,
        "Replicas whose leader-side replication is throttled (`*` or partition:broker pairs).",
    ),
    def(
        "local.retention.bytes",
        Long,
        "-2",
        Range(-2, i64::MAX),
        &["log.local.retention.bytes"],
        Stored,
        "With tiered storage, the local size cap per partition (-2: use retention.bytes).",
    ),
    def(
        "local.retention.ms",
        Long,
        "-2",
        Range(-2, i64::MAX),
        &["log.local.retention.ms"],
        Stored,
        "With tiered storage, how long segments stay local (-2: use retention.ms).",
    ),
    def(
        "max.compaction.lag.ms",
        Long,
        "9223372036854775807",
        Range(1, i64::MAX),
        &["log.cleaner.max.compaction.lag.ms"],
        Honoured,
        "Longest a record may wait before it becomes eligible for compaction, whatever the dirty ratio.",
    ),
    def(
        "max.message.bytes",
        Int,
        "1048588",
        Range(0, I32_MAX),
        &["message.max.bytes"],
        Honoured,
        "Largest record batch the topic accepts, in bytes.",
    ),
    def(
        "message.downconversion.enable",
        Boolean,
        "true",
        Any,
        &["log.message.downconversion.enable"],
        Stored,
        "Deprecated in Kafka 4 and without effect there: old-format fetches no longer exist.",
    ),
    def(
        "message.timestamp.after.max.ms",
        Long,
        "3600000",
        Range(0, i64::MAX),
        &["log.message.timestamp.after.max.ms"],
        Honoured,
        "How far ahead of the broker's clock a CreateTime timestamp may be before the batch is refused.",
    ),
    def(
        "message.timestamp.before.max.ms",
        Long,
        "9223372036854775807",
        Range(0, i64::MAX),
        &["log.message.timestamp.before.max.ms"],
        Honoured,
        "How far behind the broker's clock a CreateTime timestamp may be before the batch is refused.",
    ),
    def(
        "message.timestamp.type",
        Str,
        "CreateTime",
        OneOf(TIMESTAMP_TYPES),
        &["log.message.timestamp.type"],
        Honoured,
        "Whether records keep the producer's timestamp (CreateTime) or get the append time (LogAppendTime).",
    ),
    def(
        "min.cleanable.dirty.ratio",
        Double,
        "0.5",
        Between(0.0, 1.0),
        &["log.cleaner.min.cleanable.ratio"],
        Honoured,
        "Share of not-yet-compacted bytes at which a compacted partition is cleaned.",
    ),
    def(
        "min.compaction.lag.ms",
        Long,
        "0",
        Range(0, i64::MAX),
        &["log.cleaner.min.compaction.lag.ms"],
        Honoured,
        "Youngest a record may be and still be removed by compaction.",
    ),
    def(
        "min.insync.replicas",
        Int,
        "1",
        Range(1, I32_MAX),
        &["min.insync.replicas"],
        Stored,
        "Replicas that must hold a write before acks=all succeeds; the gateway keeps a single copy.",
    ),
    def(
        "preallocate",
        Boolean,
        "false",
        Any,
        &["log.preallocate"],
        Stored,
        "Whether segment files are allocated at full size when created.",
    ),
    def(
        "remote.log.copy.disable",
        Boolean,
        "false",
        Any,
        &[],
        Stored,
        "With tiered storage, stops copying segments to remote storage.",
    ),
    def(
        "remote.log.delete.on.disable",
        Boolean,
        "false",
        Any,
        &[],
        Stored,
        "With tiered storage, whether remote data is deleted when tiering is turned off.",
    ),
    def(
        "remote.storage.enable",
        Boolean,
        "false",
        OnlyFalse("tiered storage is not available on this gateway"),
        &[],
        Stored,
        "Whether the topic uses tiered storage (not available on this gateway).",
    ),
    def(
        "retention.bytes",
        Long,
        "-1",
        Any,
        &["log.retention.bytes"],
        Honoured,
        "Size cap per partition under the delete policy; -1 means none.",
    ),
    def(
        "retention.ms",
        Long,
        "604800000",
        Range(-1, i64::MAX),
        &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        Honoured,
        "Age after which records are removed under the delete policy; -1 keeps them forever.",
    ),
    def(
        "segment.bytes",
        Int,
        "1073741824",
        Range(1_048_576, I32_MAX),
        &["log.segment.bytes"],
        Stored,
        "Size at which a partition's current segment is closed and a new one started.",
    ),
    def(
        "segment.index.bytes",
        Int,
        "10485760",
        Range(4, I32_MAX),
        &["log.index.size.max.bytes"],
        Stored,
        "Size of a segment's offset index file.",
    ),
    def(
        "segment.jitter.ms",
        Long,
        "0",
        Range(0, i64::MAX),
        &["log.roll.jitter.ms", "log.roll.jitter.hours"],
        Stored,
        "Random amount subtracted from segment.ms so segments do not all roll at once.",
    ),
    def(
        "segment.ms",
        Long,
        "604800000",
        Range(1, i64::MAX),
        &["log.roll.ms", "log.roll.hours"],
        Stored,
        "Age at which a partition's current segment is closed even if not full.",
    ),
    def(
        "unclean.leader.election.enable",
        Boolean,
        "false",
        Any,
        &["unclean.leader.election.enable"],
        Stored,
        "Whether an out-of-sync replica may become leader; the gateway has no replicas.",
    ),
];

/// The setting called `name`, if Kafka 4.1 defines one.
pub fn lookup(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS
        .binary_search_by(|d| d.name.cmp(name))
        .ok()
        .map(|i| &TOPIC_CONFIGS[i])
}

impl ConfigDef {
    /// Parses and checks `raw` as Kafka would; returns the text to store.
    pub fn normalise(&self, raw: &str) -> Result<String, ConfigError> {
        let v = raw.trim();
        let name = self.name;
        let text = match self.kind {
            Boolean => {
                let b = parse_bool(v).ok_or_else(|| wrong(name, v, "true or false"))?;
                if let OnlyFalse(why) = self.check
                    && b
                {
                    return Err(ConfigError(format!("{name}={v}: {why}")));
                }
                b.to_string()
            }
            Int | ConfigType::Short | Long => {
                let (lo, hi) = match self.kind {
                    Int => (i64::from(i32::MIN), I32_MAX),
                    ConfigType::Short => (i64::from(i16::MIN), i64::from(i16::MAX)),
                    _ => (i64::MIN, i64::MAX),
                };
                let n = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| wrong(name, v, self.kind.as_str()))?;
                match self.check {
                    Range(min, max) if !(min..=max).contains(&n) => {
                        return Err(ConfigError(format!(
                            "{name}={v}: must be {}",
                            range_text(min, max, hi)
                        )));
                    }
                    GzipLevel if !(n == -1 || (1..=9).contains(&n)) => {
                        return Err(ConfigError(format!(
                            "{name}={v}: must be between 1 and 9, or -1"
                        )));
                    }
                    _ => {}
                }
                n.to_string()
            }
            Double => {
                let x = v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| wrong(name, v, "number"))?;
                if let Between(min, max) = self.check
                    && !(min..=max).contains(&x)
                {
                    return Err(ConfigError(format!(
                        "{name}={v}: must be between {min} and {max}"
                    )));
                }
                double_text(x)
            }
            List => {
                let items: Vec<&str> = if v.is_empty() {
                    Vec::new()
                } else {
                    v.split(',').map(str::trim).collect()
                };
                match self.check {
                    ListOf(allowed) => {
                        if items.is_empty() {
                            return Err(ConfigError(format!(
                                "{name}: an empty list is not accepted here; give {}",
                                allowed.join(" and/or ")
                            )));
                        }
                        if let Some(bad) = items.iter().find(|i| !allowed.contains(i)) {
                            return Err(ConfigError(format!(
                                "{name}={v}: `{bad}` is not one of {}",
                                allowed.join(", ")
                            )));
                        }
                    }
                    ThrottledReplicas => check_throttled(name, v, &items)?,
                    _ => {}
                }
                items.join(",")
            }
            Str | ConfigType::Class | ConfigType::Password => {
                if let OneOf(allowed) = self.check
                    && !allowed.contains(&v)
                {
                    return Err(ConfigError(format!(
                        "{name}={v}: must be one of {}",
                        allowed.join(", ")
                    )));
                }
                v.to_owned()
            }
        };
        Ok(text)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn wrong(name: &str, v: &str, expected: &str) -> ConfigError {
    ConfigError(format!("{name}={v}: not a valid {expected}"))
}

fn range_text(min: i64, max: i64, type_max: i64) -> String {
    if max == type_max {
        format!("at least {min}")
    } else {
        format!("between {min} and {max}")
    }
}

/// A double as Kafka prints one for simple values: always with a fractional part.
pub(crate) fn double_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.1}")
    } else {
        x.to_string()
    }
}

fn check_throttled(name: &str, v: &str, items: &[&str]) -> Result<(), ConfigError> {
    if items.len() == 1 && items[0] == "*" {
        return Ok(());
    }
    let pair_ok = |item: &&str| {
        let mut parts = item.split(':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(p), Some(b), None) => {
                p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
            }
            _ => false,
        }
    };
    if items.iter().all(pair_ok) {
        Ok(())
    } else {
        Err(ConfigError(format!(
            "{name}={v}: must be `*` or a list of partition:broker pairs"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_every_default_passes_its_own_rule() {
        for pair in TOPIC_CONFIGS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        for d in TOPIC_CONFIGS {
            assert_eq!(lookup(d.name), Some(d));
            if d.check == ThrottledReplicas {
                assert_eq!(d.normalise(d.default).unwrap(), "");
                continue;
            }
            assert_eq!(d.normalise(d.default).unwrap(), d.default, "{}", d.name);
            assert!(!d.doc.is_empty());
        }
        assert_eq!(TOPIC_CONFIGS.len(), 34);
    }

    #[test]
    fn names_kafka_4_removed_are_unknown() {
        for gone in [
            "message.format.version",
            "message.timestamp.difference.max.ms",
            "log.retention.ms",
            "",
        ] {
            assert!(lookup(gone).is_none(), "{gone}");
        }
    }

    /// Each numeric setting at its bounds, one beyond, and with text that is no number.
    #[test]
    fn integer_rules_at_and_beyond_their_bounds() {
        for d in TOPIC_CONFIGS {
            let (type_min, type_max) = match d.kind {
                Int => (i64::from(i32::MIN), I32_MAX),
                Long => (i64::MIN, i64::MAX),
                _ => continue,
            };
            let (min, max) = match d.check {
                Range(min, max) => (min, max),
                Any => (type_min, type_max),
                GzipLevel => (1, 9),
                other => panic!("{}: {other:?}", d.name),
            };
            assert_eq!(d.normalise(&min.to_string()).unwrap(), min.to_string());
            assert_eq!(d.normalise(&format!(" {max} ")).unwrap(), max.to_string());
            if min > type_min && d.check != GzipLevel {
                assert!(d.normalise(&(min - 1).to_string()).is_err(), "{}", d.name);
            }
            if max < type_max {
                assert!(d.normalise(&(max + 1).to_string()).is_err(), "{}", d.name);
            }
            // One past the type's own range.
            let past = i128::from(type_max) + 1;
            assert!(d.normalise(&past.to_string()).is_err(), "{}", d.name);
            for junk in ["", "ten", "1.5", "0x10", "true"] {
                assert!(d.normalise(junk).is_err(), "{}={junk}", d.name);
            }
        }
        let gzip = lookup("compression.gzip.level").unwrap();
        assert_eq!(gzip.normalise("-1").unwrap(), "-1");
        assert!(gzip.normalise("0").is_err());
        assert!(gzip.normalise("-2").is_err());
    }

    #[test]
    fn booleans_strings_doubles_and_lists() {
        let pre = lookup("preallocate").unwrap();
        assert_eq!(pre.normalise(" TRUE ").unwrap(), "true");
        assert_eq!(pre.normalise("False").unwrap(), "false");
        assert!(pre.normalise("yes").is_err());
        assert!(pre.normalise("1").is_err());

        let remote = lookup("remote.storage.enable").unwrap();
        assert_eq!(remote.normalise("false").unwrap(), "false");
        assert!(remote.normalise("true").is_err());

        let ts = lookup("message.timestamp.type").unwrap();
        assert_eq!(ts.normalise("LogAppendTime").unwrap(), "LogAppendTime");
        assert!(ts.normalise("logappendtime").is_err());
        let codec = lookup("compression.type").unwrap();
        for c in COMPRESSION_TYPES {
            assert_eq!(codec.normalise(c).unwrap(), *c);
        }
        assert!(codec.normalise("brotli").is_err());

        let ratio = lookup("min.cleanable.dirty.ratio").unwrap();
        assert_eq!(ratio.normalise("0").unwrap(), "0.0");
        assert_eq!(ratio.normalise("1").unwrap(), "1.0");
        assert_eq!(ratio.normalise("0.25").unwrap(), "0.25");
        for bad in ["-0.01", "1.01", "NaN", "inf", "half", ""] {
            assert!(ratio.normalise(bad).is_err(), "{bad}");
        }

        let policy = lookup("cleanup.policy").unwrap();
        assert_eq!(
            policy.normalise(" compact , delete").unwrap(),
            "compact,delete"
        );
        assert!(policy.normalise("").is_err());
        assert!(policy.normalise("compact,").is_err());
        assert!(policy.normalise("shred").is_err());

        let throttled = lookup("leader.replication.throttled.replicas").unwrap();
        assert_eq!(throttled.normalise("*").unwrap(), "*");
        assert_eq!(throttled.normalise("0:1, 1:1").unwrap(), "0:1,1:1");
        assert_eq!(throttled.normalise("").unwrap(), "");
        for bad in ["*,0:1", "0", "0:x", "0:1:2", "-1:0"] {
            assert!(throttled.normalise(bad).is_err(), "{bad}");
        }
    }
}
