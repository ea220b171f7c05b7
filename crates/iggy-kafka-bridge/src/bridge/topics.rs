//! Topic descriptions: where a Kafka topic lives in Iggy and what Iggy says about it
//! ([`Resolved`]), cached per Kafka topic for `metadata_max_age`; the checks that a
//! topic and partition exist; watermarks and Kafka settings derived from a description;
//! and the Kafka settings Iggy enforces itself (retention by time and by size).
//!
//! Changes made through this gateway drop the cached description at once; changes by
//! other Iggy clients are seen when it ages out, or earlier when a call fails on it.

use super::{IggyBridge, named, poisoned};
use crate::config::IggyTopicRef;
use crate::convert;
use crate::errors::{Op, map_iggy_error, timeout};
use crate::meta::{TopicKey, TopicMeta};
use crate::partition::{self, PartitionId};
use iggy::prelude::{
    IggyByteSize, IggyDuration, IggyError, IggyExpiry, MaxTopicSize, TopicClient,
    TopicUpdateOptions,
};
use kafka_store::{StoreError, StoreResult, TopicConfig, TopicInfo, Watermarks};
use std::sync::Arc;
use std::time::Duration;

/// A topic description and when Iggy gave it.
pub(super) struct CachedTopic {
    at: std::time::Instant,
    resolved: Arc<Resolved>,
}

/// Most topic descriptions kept; past it the cache starts over.
const MAX_CACHED_TOPICS: usize = 10_000;

/// A resolved Kafka topic: where it lives and what Iggy says about it.
pub(super) struct Resolved {
    pub(super) target: IggyTopicRef,
    pub(super) key: TopicKey,
    pub(super) partitions: Vec<iggy::prelude::Partition>,
    pub(super) partitions_count: u32,
    pub(super) message_expiry: IggyExpiry,
    pub(super) max_topic_size: MaxTopicSize,
}

impl Resolved {
    pub(super) fn new(target: IggyTopicRef, d: iggy::prelude::TopicDetails) -> Resolved {
        Resolved {
            key: TopicKey {
                stream: target.stream.clone(),
                topic: target.topic.clone(),
                created_at: d.created_at.as_micros(),
            },
            target,
            partitions: d.partitions,
            partitions_count: d.partitions_count,
            message_expiry: d.message_expiry,
            max_topic_size: d.max_topic_size,
        }
    }
}

/// FNV-1a, 128 bits: a stable Kafka topic id from the Iggy topic's identity. It must not
/// change between gateway runs, so no per-process hasher is used.
pub(super) fn topic_id(key: &TopicKey) -> u128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    let created = key.created_at.to_be_bytes();
    for part in [
        key.stream.as_bytes(),
        &[0],
        key.topic.as_bytes(),
        &[0],
        &created[..],
    ] {
        for byte in part {
            hash ^= u128::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash.max(1)
}

pub(super) fn expiry_of(retention_ms: i64) -> IggyExpiry {
    match u64::try_from(retention_ms) {
        Ok(ms) if ms > 0 => {
            IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_millis(ms)))
        }
        _ => IggyExpiry::NeverExpire,
    }
}

pub(super) fn topic_size_of(retention_bytes: i64, partitions: u32) -> MaxTopicSize {
    match u64::try_from(retention_bytes) {
        // Kafka's cap is per partition, Iggy's per topic.
        Ok(bytes) => MaxTopicSize::Custom(IggyByteSize::from(
            bytes.saturating_mul(u64::from(partitions.max(1))),
        )),
        Err(_) => MaxTopicSize::Unlimited,
    }
}

/// `retention.ms` as Iggy should enforce it: only topics whose `cleanup.policy`
/// includes delete expire messages.
pub(super) fn expiring_ms(config: &TopicConfig) -> i64 {
    if config.cleanup_policy.deletes() {
        config.retention_ms
    } else {
        -1
    }
}

/// `retention.bytes` as Iggy should enforce it (delete policy only, like `expiring_ms`).
pub(super) fn capped_bytes(config: &TopicConfig) -> i64 {
    if config.cleanup_policy.deletes() {
        config.retention_bytes
    } else {
        -1
    }
}

/// Iggy's per-topic segment size for an explicit `segment.bytes`: within Iggy's bounds
/// (1 MiB to 1 GiB), a multiple of 512.
pub(super) fn segment_size_of(config: &TopicConfig) -> Option<IggyByteSize> {
    if !config.overrides.contains_key("segment.bytes") {
        return None;
    }
    let bytes = u64::try_from(config.segment_bytes).unwrap_or(0);
    Some(IggyByteSize::from(
        bytes.clamp(1 << 20, 1 << 30) / 512 * 512,
    ))
}

pub(super) fn validate_config(config: &TopicConfig) -> StoreResult<()> {
    if config.retention_ms < -1 || config.retention_ms == 0 {
        return Err(StoreError::InvalidConfig(format!(
            "retention.ms {} (must be -1 or positive)",
            config.retention_ms
        )));
    }
    if config.retention_bytes < -1 {
        return Err(StoreError::InvalidConfig(format!(
            "retention.bytes {}",
            config.retention_bytes
        )));
    }
    if config.max_message_bytes < 0 {
        return Err(StoreError::InvalidConfig(format!(
            "max.message.bytes {}",
            config.max_message_bytes
        )));
    }
    Ok(())
}

impl IggyBridge {
    /// Asks Iggy for the topic's description (and caches it).
    pub(super) async fn resolve(&self, name: &str) -> StoreResult<Option<Arc<Resolved>>> {
        let target = self.inner.map.resolve(name);
        let (s, t) = (named(&target.stream, name)?, named(&target.topic, name)?);
        let details = match self
            .call(Op::Read, name, -1, self.any_session().get_topic(&s, &t))
            .await
        {
            Ok(d) => d,
            Err(StoreError::UnknownTopicOrPartition { .. }) => None,
            Err(e) => return Err(e),
        };
        let resolved = details.map(|d| Arc::new(Resolved::new(target, d)));
        self.remember(name, resolved.clone())?;
        Ok(resolved)
    }

    /// Caches (or, for `None` or when caching is off, drops) the description of `name`.
    pub(super) fn remember(&self, name: &str, resolved: Option<Arc<Resolved>>) -> StoreResult<()> {
        let mut cache = self.inner.topics.lock().map_err(poisoned)?;
        match resolved {
            Some(r) if !self.inner.config.metadata_max_age.is_zero() => {
                if cache.len() >= MAX_CACHED_TOPICS {
                    cache.clear();
                }
                cache.insert(
                    name.to_owned(),
                    CachedTopic {
                        at: std::time::Instant::now(),
                        resolved: r,
                    },
                );
            }
            _ => {
                cache.remove(name);
            }
        }
        Ok(())
    }

    /// The topic's description, from the cache while it is younger than
    /// `metadata_max_age`, else from Iggy.
    ///
    /// When Iggy cannot be reached (a primary failing over, a network partition) an
    /// older cached description is served instead of the error: a topic that existed a
    /// moment ago is far more likely to still exist than not, and answering Metadata
    /// with an error for it makes a joining consumer subscribe to nothing (librdkafka
    /// then sees no partitions and does not rebalance until its next metadata refresh
    /// finds the topic). Requests that touch the partition itself still fail with the
    /// retriable error and are retried by the client.
    pub(super) async fn resolve_cached(&self, name: &str) -> StoreResult<Option<Arc<Resolved>>> {
        let stale = {
            let cache = self.inner.topics.lock().map_err(poisoned)?;
            match cache.get(name) {
                Some(c) if c.at.elapsed() < self.inner.config.metadata_max_age => {
                    return Ok(Some(c.resolved.clone()));
                }
                Some(c) => Some(c.resolved.clone()),
                None => None,
            }
        };
        match self.resolve(name).await {
            Err(e @ (StoreError::Unavailable(_) | StoreError::Timeout(_))) => match stale {
                Some(r) => {
                    tracing::debug!(topic = name, error = %e, "Iggy unreachable, serving the cached topic description");
                    Ok(Some(r))
                }
                None => Err(e),
            },
            other => other,
        }
    }

    /// Drops the cached description of `name` (after a change, or when Iggy says the
    /// topic is gone).
    pub(super) fn forget(&self, name: &str) {
        if let Ok(mut cache) = self.inner.topics.lock() {
            cache.remove(name);
        }
    }

    /// The topic's fresh description; fails when the topic or partition does not exist.
    pub(super) async fn require(
        &self,
        name: &str,
        partition: PartitionId,
    ) -> StoreResult<Arc<Resolved>> {
        let resolved = self.resolve(name).await?;
        Self::check_partition(name, partition, resolved)
    }

    /// Like [`Self::require`], from the cache when fresh enough. A partition beyond the
    /// cached count is checked with Iggy once (it may have been added since).
    pub(super) async fn require_cached(
        &self,
        name: &str,
        partition: PartitionId,
    ) -> StoreResult<Arc<Resolved>> {
        let cached = self.resolve_cached(name).await?;
        match cached {
            Some(r) if partition.is_below(r.partitions_count) => Ok(r),
            _ => self.require(name, partition).await,
        }
    }

    fn check_partition(
        name: &str,
        partition: PartitionId,
        resolved: Option<Arc<Resolved>>,
    ) -> StoreResult<Arc<Resolved>> {
        let unknown = || StoreError::UnknownTopicOrPartition {
            topic: name.to_owned(),
            partition: partition.kafka(),
        };
        let resolved = resolved.ok_or_else(unknown)?;
        if !partition.is_below(resolved.partitions_count) {
            return Err(unknown());
        }
        Ok(resolved)
    }

    /// [`Self::config_of`] for a resolved topic.
    pub(super) fn meta_of(&self, r: &Resolved) -> StoreResult<TopicMeta> {
        self.config_of(
            &r.key,
            r.message_expiry,
            r.max_topic_size,
            r.partitions_count,
        )
    }

    pub(super) fn config_of(
        &self,
        key: &TopicKey,
        expiry: IggyExpiry,
        size: MaxTopicSize,
        partitions: u32,
    ) -> StoreResult<TopicMeta> {
        if let Some(meta) = self.inner.meta.topic(key)? {
            return Ok(meta);
        }
        // A topic made by a native Iggy client: describe what Iggy enforces.
        let retention_ms = match expiry {
            IggyExpiry::ExpireDuration(d) => convert::kafka_i64(d.as_micros() / 1000),
            _ => -1,
        };
        let retention_bytes = match size {
            MaxTopicSize::Custom(b) => {
                convert::kafka_i64(b.as_bytes_u64() / u64::from(partitions.max(1)))
            }
            _ => -1,
        };
        Ok(TopicMeta {
            config: TopicConfig {
                retention_ms,
                retention_bytes,
                ..TopicConfig::default()
            },
            log_start: Default::default(),
            compacted: Default::default(),
            transactional: false,
        })
    }

    pub(super) fn info(&self, name: &str, r: &Resolved) -> StoreResult<TopicInfo> {
        let meta = self.meta_of(r)?;
        Ok(TopicInfo {
            name: name.to_owned(),
            id: topic_id(&r.key),
            partitions: partition::count_for_kafka(name, r.partitions_count)?,
            config: meta.config,
        })
    }

    pub(super) fn watermarks_of(
        &self,
        r: &Resolved,
        partition: PartitionId,
    ) -> StoreResult<Watermarks> {
        let p = r
            .partitions
            .iter()
            .find(|p| p.id == partition.iggy())
            .ok_or_else(|| StoreError::UnknownTopicOrPartition {
                topic: r.target.topic.clone(),
                partition: partition.kafka(),
            })?;
        let count = convert::kafka_i64(p.messages_count);
        let current = convert::kafka_i64(p.current_offset);
        // Iggy reports the offset of the last message: 0 both for "empty" and for "one
        // message at 0", told apart by the count. A partition whose only message (at 0)
        // expired also reads as empty until the next append; see docs/bridge.md.
        let high_watermark = if count > 0 || current > 0 {
            current + 1
        } else {
            0
        };
        let physical_start = (high_watermark - count).max(0);
        let meta = self.inner.meta.topic(&r.key)?;
        let logical_start = meta
            .as_ref()
            .and_then(|m| m.log_start.get(&partition.iggy()).copied())
            .unwrap_or(0);
        // A compacted partition starts where its compacted view starts, below the
        // segments compaction deleted. Iggy's start beyond the boundary means either
        // that retention removed more (`compact,delete` only: other compacted topics
        // have no Iggy expiry) or that another gateway's newer pass deleted segments
        // this gateway's view of the boundary does not cover yet (its read finds the
        // generation gone and refreshes).
        let start = match meta.and_then(|m| {
            let deletes = m.config.cleanup_policy.deletes();
            m.compacted
                .get(&partition.iggy())
                .map(|c| (c.clone(), deletes))
        }) {
            Some((c, deletes)) if physical_start <= c.end || !deletes => c.start,
            _ => physical_start,
        };
        Ok(Watermarks {
            log_start_offset: start.max(logical_start).min(high_watermark),
            high_watermark,
        })
    }

    pub(super) async fn apply_iggy_settings(
        &self,
        r: &Resolved,
        name: &str,
        config: &TopicConfig,
        partitions: u32,
    ) -> StoreResult<()> {
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let mut options = TopicUpdateOptions {
            message_expiry: Some(expiry_of(expiring_ms(config))),
            max_topic_size: Some(topic_size_of(capped_bytes(config), partitions)),
            ..TopicUpdateOptions::default()
        };
        let session = self.any_session();
        let first = tokio::time::timeout(
            self.inner.config.call_timeout,
            session.update_topic(&s, &t, &r.target.topic, &options),
        )
        .await;
        match first {
            Ok(Ok(())) => Ok(()),
            // Iggy cannot cap a topic below one segment; it enforces retention.bytes at
            // segment granularity anyway, so raise the cap to its floor.
            Ok(Err(IggyError::InvalidTopicSize(_, floor))) => {
                options.max_topic_size = Some(MaxTopicSize::Custom(floor));
                self.call(
                    Op::Admin,
                    name,
                    -1,
                    session.update_topic(&s, &t, &r.target.topic, &options),
                )
                .await
            }
            Ok(Err(e)) => Err(map_iggy_error(&e, Op::Admin, name, -1)),
            Err(_) => Err(timeout(Op::Admin, "update_topic")),
        }
    }

    /// A cached description younger than `metadata_max_age` whose topic has the Kafka
    /// id `id`, with its Kafka name.
    pub(super) fn cached_by_id(&self, id: u128) -> StoreResult<Option<(String, Arc<Resolved>)>> {
        let cache = self.inner.topics.lock().map_err(poisoned)?;
        Ok(cache
            .iter()
            .find(|(_, c)| {
                c.at.elapsed() < self.inner.config.metadata_max_age
                    && topic_id(&c.resolved.key) == id
            })
            .map(|(name, c)| (name.clone(), c.resolved.clone())))
    }

    /// The cached description of `name`, however old.
    pub(super) fn cached_any_age(&self, name: &str) -> Option<Arc<Resolved>> {
        let cache = self.inner.topics.lock().ok()?;
        Some(cache.get(name)?.resolved.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_are_stable_distinct_and_non_zero() {
        let key = |c| TopicKey {
            stream: "kafka".into(),
            topic: "orders".into(),
            created_at: c,
        };
        assert_eq!(topic_id(&key(1)), topic_id(&key(1)));
        assert_ne!(topic_id(&key(1)), topic_id(&key(2)));
        assert_ne!(topic_id(&key(0)), 0);
    }

    #[test]
    fn retention_maps_to_iggy_settings() {
        assert_eq!(expiry_of(-1), IggyExpiry::NeverExpire);
        assert_eq!(
            expiry_of(1500),
            IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_millis(1500)))
        );
        assert_eq!(topic_size_of(-1, 3), MaxTopicSize::Unlimited);
        assert_eq!(
            topic_size_of(100, 3),
            MaxTopicSize::Custom(IggyByteSize::from(300))
        );
        assert!(
            validate_config(&TopicConfig {
                retention_ms: 0,
                ..TopicConfig::default()
            })
            .is_err()
        );
        validate_config(&TopicConfig::default()).unwrap();
    }
}
