//! The embedded store's log cleaner, read at scrape time: cumulative bytes cleaned,
//! records removed and partition passes, and the dirty ratio of compacted partitions.
//!
//! The dirty ratio is one series per partition; at most [`MAX_DIRTY_RATIO_PARTITIONS`]
//! are shown (in topic name and partition order), so a store with many compacted
//! partitions cannot grow a scrape without bound.

use kafka_store::memory::MemoryStore;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::{Arc, Weak};

/// Compacted partitions whose dirty ratio a scrape shows at most.
pub const MAX_DIRTY_RATIO_PARTITIONS: usize = 1_000;

/// Encodes a [`MemoryStore`]'s cleaner statistics; holds the store weakly.
#[derive(Debug)]
pub struct LogCleanerCollector {
    store: Weak<MemoryStore>,
}

impl LogCleanerCollector {
    /// A collector of `store`'s cleaner.
    pub fn new(store: &Arc<MemoryStore>) -> Self {
        Self {
            store: Arc::downgrade(store),
        }
    }
}

impl Collector for LogCleanerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(store) = self.store.upgrade() else {
            return Ok(());
        };
        let stats = store.cleaner_stats(MAX_DIRTY_RATIO_PARTITIONS);
        for (name, help, value) in [
            (
                "log_cleaner_bytes_cleaned",
                "Record batch bytes the log cleaner read in completed partition passes",
                stats.bytes_cleaned,
            ),
            (
                "log_cleaner_records_removed",
                "Records the log cleaner removed (superseded values and expired tombstones)",
                stats.records_removed,
            ),
            (
                "log_cleaner_passes",
                "Partition passes the log cleaner completed",
                stats.passes,
            ),
        ] {
            let family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(family)?;
        }
        let mut family = encoder.encode_descriptor(
            "log_cleaner_dirty_ratio",
            "Dirty bytes over cleanable bytes of a compacted partition when the cleaner last looked",
            None,
            MetricType::Gauge,
        )?;
        for p in &stats.partitions {
            let partition = p.partition.to_string();
            let labels = [
                ("topic", p.topic.as_str()),
                ("partition", partition.as_str()),
            ];
            ConstGauge::new(p.dirty_ratio).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use bytes::{Bytes, BytesMut};
    use kafka_records::{BatchOptions, DecodeLimits, NewRecord, encode_batch};
    use kafka_store::{CleanupPolicy, LogStore, NewTopic, TopicConfig, ValidBatch};

    fn keyed(key: &str) -> ValidBatch {
        let record = NewRecord {
            timestamp: 1,
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
        };
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &[record], &mut out).unwrap();
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    #[tokio::test]
    async fn cleaner_counters_and_dirty_ratios_are_scraped() {
        let store = Arc::new(MemoryStore::default());
        let config = TopicConfig {
            cleanup_policy: CleanupPolicy::Compact,
            min_cleanable_dirty_ratio: 0.0,
            ..TopicConfig::KAFKA_DEFAULT
        };
        let topic = NewTopic {
            name: "c".to_owned(),
            partitions: 2,
            config,
        };
        store.create_topic(topic, false).await.unwrap();
        for key in ["a", "a", "b"] {
            store.append("c", 1, vec![keyed(key)], 10).await.unwrap();
        }
        let mut metrics = Metrics::new();
        metrics.register_log_cleaner(&store);
        let before = metrics.encode().unwrap();
        assert!(
            before.contains("kafka_gateway_log_cleaner_records_removed_total 0"),
            "{before}"
        );
        assert_eq!(store.apply_compaction(20), 1);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains("kafka_gateway_log_cleaner_records_removed_total 1"),
            "{text}"
        );
        assert!(
            text.contains("kafka_gateway_log_cleaner_passes_total 1"),
            "{text}"
        );
        assert!(
            !text.contains("kafka_gateway_log_cleaner_bytes_cleaned_total 0"),
            "{text}"
        );
        assert!(
            text.contains("kafka_gateway_log_cleaner_dirty_ratio{topic=\"c\",partition=\"1\"} 1.0"),
            "{text}"
        );
        let docs = include_str!("../../../../docs/observability.md");
        for name in [
            "kafka_gateway_log_cleaner_bytes_cleaned_total",
            "kafka_gateway_log_cleaner_records_removed_total",
            "kafka_gateway_log_cleaner_passes_total",
            "kafka_gateway_log_cleaner_dirty_ratio",
        ] {
            assert!(text.contains(name), "{name} in {text}");
            assert!(docs.contains(&format!("`{name}`")), "{name} not documented");
        }
        // Partition 0 is empty: nothing dirty.
        assert!(
            text.contains("kafka_gateway_log_cleaner_dirty_ratio{topic=\"c\",partition=\"0\"} 0.0"),
            "{text}"
        );
    }
}
