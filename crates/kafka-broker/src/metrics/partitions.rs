//! Per-partition traffic counters: records and bytes produced and fetched.
//!
//! Kept as atomics in a map keyed by topic name (read-locked on the request path, written
//! only when a topic or partition is first seen), and encoded by a collector at scrape
//! time. Topics that no longer exist are dropped when `/metrics` is scraped, so topic
//! churn does not grow the map.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Partitions tracked per topic at most: partition indexes at or above it are not
/// counted (the broker refuses them anyway when the topic has fewer partitions).
const MAX_PARTITIONS: usize = 100_000;

#[derive(Debug, Default)]
struct Counts {
    produced_records: AtomicU64,
    produced_bytes: AtomicU64,
    fetched_records: AtomicU64,
    fetched_bytes: AtomicU64,
}

/// Records and bytes produced and fetched, per topic and partition.
#[derive(Debug, Default)]
pub struct PartitionCounters {
    topics: RwLock<HashMap<String, Vec<Counts>>>,
}

impl PartitionCounters {
    /// Adds a successful append of `records` records in `bytes` batch bytes.
    pub fn produced(&self, topic: &str, partition: i32, records: u64, bytes: u64) {
        self.with(topic, partition, |c| {
            c.produced_records.fetch_add(records, Ordering::Relaxed);
            c.produced_bytes.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    /// Adds `records` records in `bytes` batch bytes returned by a fetch.
    pub fn fetched(&self, topic: &str, partition: i32, records: u64, bytes: u64) {
        self.with(topic, partition, |c| {
            c.fetched_records.fetch_add(records, Ordering::Relaxed);
            c.fetched_bytes.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    fn with(&self, topic: &str, partition: i32, f: impl Fn(&Counts)) {
        let Ok(index) = usize::try_from(partition) else {
            return;
        };
        if index >= MAX_PARTITIONS {
            return;
        }
        if let Ok(topics) = self.topics.read()
            && let Some(c) = topics.get(topic).and_then(|v| v.get(index))
        {
            f(c);
            return;
        }
        let Ok(mut topics) = self.topics.write() else {
            return;
        };
        let counts = topics.entry(topic.to_string()).or_default();
        if counts.len() <= index {
            counts.resize_with(index + 1, Counts::default);
        }
        f(&counts[index]);
    }

    /// Forgets every topic not in `live`.
    pub(crate) fn retain(&self, live: &HashSet<&str>) {
        if let Ok(mut topics) = self.topics.write() {
            topics.retain(|t, _| live.contains(t.as_str()));
        }
    }
}

impl Collector for PartitionCounters {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(topics) = self.topics.read() else {
            return Ok(());
        };
        let mut sorted: Vec<_> = topics.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        type Pick = fn(&Counts) -> &AtomicU64;
        let series: [(&str, &str, Pick); 4] = [
            (
                "partition_produced_records",
                "Records appended, by topic and partition",
                |c| &c.produced_records,
            ),
            (
                "partition_produced_bytes",
                "Record batch bytes appended, by topic and partition",
                |c| &c.produced_bytes,
            ),
            (
                "partition_fetched_records",
                "Records returned by Fetch, by topic and partition",
                |c| &c.fetched_records,
            ),
            (
                "partition_fetched_bytes",
                "Record batch bytes returned by Fetch, by topic and partition",
                |c| &c.fetched_bytes,
            ),
        ];
        for (name, help, pick) in series {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (topic, counts) in &sorted {
                for (partition, c) in counts.iter().enumerate() {
                    let value = pick(c).load(Ordering::Relaxed);
                    if value == 0 && c.produced_records.load(Ordering::Relaxed) == 0 {
                        // Only partitions that saw traffic of some kind are shown.
                        let any = c.fetched_records.load(Ordering::Relaxed)
                            + c.fetched_bytes.load(Ordering::Relaxed)
                            + c.produced_bytes.load(Ordering::Relaxed);
                        if any == 0 {
                            continue;
                        }
                    }
                    let partition = partition.to_string();
                    let labels = [("topic", topic.as_str()), ("partition", partition.as_str())];
                    ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// Records and bytes in a run of record batches (v2 headers: the length at offset 8,
/// the record count at offset 57). A truncated tail is not counted.
pub(crate) fn batch_totals(mut bytes: &[u8]) -> (u64, u64) {
    let (mut records, mut total) = (0u64, 0u64);
    while bytes.len() >= 61 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Ok(len) = usize::try_from(len) else { break };
        let whole = len.saturating_add(12);
        if whole > bytes.len() || whole < 61 {
            break;
        }
        let count = i32::from_be_bytes([bytes[57], bytes[58], bytes[59], bytes[60]]);
        records += u64::try_from(count).unwrap_or(0);
        total += whole as u64;
        bytes = &bytes[whole..];
    }
    (records, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_records::{BatchOptions, NewRecord, encode_batch};

    fn batch(n: usize) -> Bytes {
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1,
                key: None,
                value: Some(Bytes::from(vec![b'x'; 10 + i])),
                headers: vec![],
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        out.freeze()
    }

    #[test]
    fn batch_totals_counts_records_and_bytes_of_whole_batches() {
        let a = batch(3);
        let b = batch(5);
        let mut both = a.to_vec();
        both.extend_from_slice(&b);
        assert_eq!(batch_totals(&both), (8, (a.len() + b.len()) as u64));
        // A truncated second batch is left out.
        assert_eq!(batch_totals(&both[..both.len() - 1]), (3, a.len() as u64));
        assert_eq!(batch_totals(&[]), (0, 0));
        assert_eq!(batch_totals(&[0xff; 70]), (0, 0));
    }

    #[test]
    fn counters_add_up_and_forget_deleted_topics() {
        let c = PartitionCounters::default();
        c.produced("t", 1, 3, 100);
        c.produced("t", 1, 2, 50);
        c.fetched("t", 0, 4, 70);
        c.produced("gone", 0, 1, 1);
        c.produced("t", -1, 1, 1);
        c.produced("t", i32::MAX, 1, 1);
        let mut text = String::new();
        let mut reg = prometheus_client::registry::Registry::default();
        let c = std::sync::Arc::new(c);
        reg.register_collector(Box::new(c.clone()));
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(
            text.contains("partition_produced_records_total{topic=\"t\",partition=\"1\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("partition_produced_bytes_total{topic=\"t\",partition=\"1\"} 150"),
            "{text}"
        );
        assert!(
            text.contains("partition_fetched_records_total{topic=\"t\",partition=\"0\"} 4"),
            "{text}"
        );
        assert!(text.contains("topic=\"gone\""));
        c.retain(&HashSet::from(["t"]));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(!text.contains("topic=\"gone\""), "{text}");
        assert!(!text.contains("partition=\"-1\""));
    }
}
