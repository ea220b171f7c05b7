//! Per-partition traffic counters: records and bytes produced and fetched.
//!
//! Kept as atomics in maps keyed by topic name, or by topic id for the request versions
//! that name topics by id only (Produce v13+, Fetch v13+); read-locked on the request
//! path, written only when a topic or partition is first seen. A collector encodes them
//! at scrape time, after the scrape refreshed which ids name which topics; topics that
//! no longer exist are dropped then, so topic churn does not grow the maps.

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
    by_id: RwLock<HashMap<u128, Vec<Counts>>>,
    /// Topic ids and their names, as of the last scrape.
    names: RwLock<HashMap<u128, String>>,
}

/// A topic as a request names it.
#[derive(Debug, Clone, Copy)]
pub enum TopicRef<'a> {
    /// By name.
    Name(&'a str),
    /// By id (Kafka's topic UUID as an integer).
    Id(u128),
}

impl PartitionCounters {
    /// Adds a successful append of `records` records in `bytes` batch bytes.
    pub fn produced(&self, topic: TopicRef<'_>, partition: i32, records: u64, bytes: u64) {
        self.with(topic, partition, |c| {
            c.produced_records.fetch_add(records, Ordering::Relaxed);
            c.produced_bytes.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    /// Adds `records` records in `bytes` batch bytes returned by a fetch.
    pub fn fetched(&self, topic: TopicRef<'_>, partition: i32, records: u64, bytes: u64) {
        self.with(topic, partition, |c| {
            c.fetched_records.fetch_add(records, Ordering::Relaxed);
            c.fetched_bytes.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    fn with(&self, topic: TopicRef<'_>, partition: i32, f: impl Fn(&Counts)) {
        let Ok(index) = usize::try_from(partition) else {
            return;
        };
        if index >= MAX_PARTITIONS {
            return;
        }
        match topic {
            TopicRef::Name(name) => add(&self.topics, name, index, f),
            TopicRef::Id(id) => add(&self.by_id, &id, index, f),
        }
    }

    /// Forgets every topic not in `live` (name and id), and learns the live ids' names.
    pub(crate) fn retain(&self, live: &[(&str, u128)]) {
        let names: HashSet<&str> = live.iter().map(|(n, _)| *n).collect();
        if let Ok(mut topics) = self.topics.write() {
            topics.retain(|t, _| names.contains(t.as_str()));
        }
        let ids: HashMap<u128, String> = live.iter().map(|(n, id)| (*id, n.to_string())).collect();
        if let Ok(mut by_id) = self.by_id.write() {
            by_id.retain(|id, _| ids.contains_key(id));
        }
        if let Ok(mut known) = self.names.write() {
            *known = ids;
        }
    }

    /// Every topic's counts by name, ids resolved, sorted by name.
    fn snapshot(&self) -> Vec<(String, Vec<[u64; 4]>)> {
        let mut merged: HashMap<String, Vec<[u64; 4]>> = HashMap::new();
        let mut merge = |name: &str, counts: &[Counts]| {
            let into = merged.entry(name.to_string()).or_default();
            if into.len() < counts.len() {
                into.resize(counts.len(), [0; 4]);
            }
            for (slot, c) in into.iter_mut().zip(counts) {
                for (v, a) in slot.iter_mut().zip(c.all()) {
                    *v += a.load(Ordering::Relaxed);
                }
            }
        };
        if let Ok(topics) = self.topics.read() {
            for (name, counts) in topics.iter() {
                merge(name, counts);
            }
        }
        if let (Ok(by_id), Ok(names)) = (self.by_id.read(), self.names.read()) {
            for (id, counts) in by_id.iter() {
                // An id not yet resolved shows from the next scrape on.
                if let Some(name) = names.get(id) {
                    merge(name, counts);
                }
            }
        }
        let mut out: Vec<_> = merged.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

impl Counts {
    fn all(&self) -> [&AtomicU64; 4] {
        [
            &self.produced_records,
            &self.produced_bytes,
            &self.fetched_records,
            &self.fetched_bytes,
        ]
    }
}

fn add<K, Q>(map: &RwLock<HashMap<K, Vec<Counts>>>, key: &Q, index: usize, f: impl Fn(&Counts))
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: ToOwned<Owned = K> + std::hash::Hash + Eq + ?Sized,
{
    if let Ok(m) = map.read()
        && let Some(c) = m.get(key).and_then(|v| v.get(index))
    {
        f(c);
        return;
    }
    let Ok(mut m) = map.write() else {
        return;
    };
    let counts = m.entry(key.to_owned()).or_default();
    if counts.len() <= index {
        counts.resize_with(index + 1, Counts::default);
    }
    f(&counts[index]);
}

impl Collector for PartitionCounters {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let topics = self.snapshot();
        let series: [(&str, &str, usize); 4] = [
            (
                "partition_produced_records",
                "Records appended, by topic and partition",
                0,
            ),
            (
                "partition_produced_bytes",
                "Record batch bytes appended, by topic and partition",
                1,
            ),
            (
                "partition_fetched_records",
                "Records returned by Fetch, by topic and partition",
                2,
            ),
            (
                "partition_fetched_bytes",
                "Record batch bytes returned by Fetch, by topic and partition",
                3,
            ),
        ];
        for (name, help, which) in series {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (topic, counts) in &topics {
                for (partition, c) in counts.iter().enumerate() {
                    // Only partitions that saw traffic of some kind are shown.
                    if c.iter().all(|v| *v == 0) {
                        continue;
                    }
                    let partition = partition.to_string();
                    let labels = [("topic", topic.as_str()), ("partition", partition.as_str())];
                    ConstCounter::new(c[which]).encode(family.encode_family(&labels)?)?;
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
        let t = TopicRef::Name("t");
        c.produced(t, 1, 3, 100);
        c.fetched(t, 0, 4, 70);
        c.produced(TopicRef::Name("gone"), 0, 1, 1);
        c.produced(t, -1, 1, 1);
        c.produced(t, i32::MAX, 1, 1);
        // By id: shown under the name once a scrape resolved it, summed with the name's.
        c.produced(TopicRef::Id(7), 1, 2, 50);
        c.fetched(TopicRef::Id(9), 0, 1, 1);
        let mut text = String::new();
        let mut reg = prometheus_client::registry::Registry::default();
        let c = std::sync::Arc::new(c);
        reg.register_collector(Box::new(c.clone()));
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        let has = |text: &str, line: &str| text.lines().any(|l| l == line);
        // Ids are not resolved before the first scrape's refresh.
        assert!(
            has(
                &text,
                "partition_produced_records_total{topic=\"t\",partition=\"1\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("topic=\"gone\""));
        c.retain(&[("t", 7), ("gone", 8)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(
            has(
                &text,
                "partition_produced_records_total{topic=\"t\",partition=\"1\"} 5"
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                "partition_produced_bytes_total{topic=\"t\",partition=\"1\"} 150"
            ),
            "{text}"
        );
        assert!(
            has(
                &text,
                "partition_fetched_records_total{topic=\"t\",partition=\"0\"} 4"
            ),
            "{text}"
        );
        assert!(!text.contains("partition_fetched_records_total{topic=\"t\",partition=\"0\"} 5"));
        c.retain(&[("t", 7)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(!text.contains("topic=\"gone\""), "{text}");
        assert!(!text.contains("partition=\"-1\""));
    }
}
