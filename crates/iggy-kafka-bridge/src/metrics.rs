//! Iggy round trips as Prometheus metrics: how many, how many failed or timed out, and
//! how long they took, by kind of operation (`read`, `admin`, `write`).
//!
//! Every SDK call the bridge makes under its call timeout is observed here (polls,
//! sends, topic lookups and administration, the meta log, pings). The families exist
//! from the start; [`crate::IggyBridge::register_metrics`] adds them to a registry.

use crate::errors::Op;
use kafka_store::StoreResult;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// The `op` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OpLabel {
    op: &'static str,
}

fn label(op: Op) -> OpLabel {
    OpLabel {
        op: match op {
            Op::Read => "read",
            Op::Admin => "admin",
            Op::Write => "write",
        },
    }
}

/// The labels of a refused meta record.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RefusedLabel {
    log: String,
    reason: &'static str,
}

/// The round-trip families; clones share them.
#[derive(Clone, Debug)]
pub(crate) struct IggyMetrics {
    requests: Family<OpLabel, Counter>,
    errors: Family<OpLabel, Counter>,
    latency: Family<OpLabel, Histogram>,
    /// Messages in Iggy's answers to the polls of reads and scans.
    polled_messages: Counter,
    /// Their payload and user-header bytes.
    polled_bytes: Counter,
    /// The compaction cleaner's figures.
    pub(crate) compaction: CompactionMetrics,
    /// Meta records ignored for want of a valid proof, by log and reason.
    meta_refused: Family<RefusedLabel, Counter>,
    /// Their total (not exported; the family is).
    meta_refused_total: Counter,
}

/// What the compaction cleaner did (`kafka_gateway_iggy_compaction_*`).
#[derive(Clone, Debug, Default)]
pub(crate) struct CompactionMetrics {
    passes: Counter,
    failures: Counter,
    bytes_cleaned: Counter,
    records_removed: Counter,
    bytes_reclaimed: Counter,
    /// Dirty ratio of the partition the cleaner looked at last, as Kafka's
    /// `max-dirty-percent` but per look.
    dirty_ratio: Gauge<f64, AtomicU64>,
}

impl CompactionMetrics {
    pub(crate) fn observe_dirty_ratio(&self, ratio: f64) {
        self.dirty_ratio.set(ratio);
    }

    pub(crate) fn record_pass(&self, bytes: u64, removed: u64) {
        self.passes.inc();
        self.bytes_cleaned.inc_by(bytes);
        self.records_removed.inc_by(removed);
    }

    pub(crate) fn record_reclaimed(&self, bytes: u64) {
        self.bytes_reclaimed.inc_by(bytes);
    }

    pub(crate) fn record_failures(&self, n: u32) {
        self.failures.inc_by(u64::from(n));
    }

    /// Bytes reclaimed in Iggy so far.
    pub(crate) fn reclaimed(&self) -> u64 {
        self.bytes_reclaimed.get()
    }

    fn register(&self, reg: &mut Registry) {
        let reg = reg.sub_registry_with_prefix("compaction");
        reg.register("passes", "Compaction passes run", self.passes.clone());
        reg.register(
            "failures",
            "Compaction passes that failed (retried the next round)",
            self.failures.clone(),
        );
        reg.register_with_unit(
            "cleaned",
            "Message bytes compaction passes read (Kafka's bytes cleaned)",
            Unit::Bytes,
            self.bytes_cleaned.clone(),
        );
        reg.register(
            "records_removed",
            "Records compaction passes removed",
            self.records_removed.clone(),
        );
        reg.register_with_unit(
            "reclaimed",
            "Iggy bytes given back by deleted segments and companion generations",
            Unit::Bytes,
            self.bytes_reclaimed.clone(),
        );
        reg.register(
            "dirty_ratio",
            "Dirty ratio of the last compacted partition looked at",
            self.dirty_ratio.clone(),
        );
    }
}

impl Default for IggyMetrics {
    fn default() -> Self {
        IggyMetrics {
            requests: Family::default(),
            errors: Family::default(),
            // 50 µs to 13 s.
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00005, 2.0, 19))
            }),
            polled_messages: Counter::default(),
            polled_bytes: Counter::default(),
            compaction: CompactionMetrics::default(),
            meta_refused: Family::default(),
            meta_refused_total: Counter::default(),
        }
    }
}

impl IggyMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        let reg = registry.sub_registry_with_prefix("kafka_gateway_iggy");
        reg.register(
            "requests",
            "Round trips to the Iggy server, by kind of operation",
            self.requests.clone(),
        );
        reg.register(
            "request_errors",
            "Round trips to the Iggy server that failed or timed out, by kind of operation",
            self.errors.clone(),
        );
        reg.register_with_unit(
            "request_duration",
            "Round-trip time to the Iggy server, by kind of operation",
            Unit::Seconds,
            self.latency.clone(),
        );
        reg.register(
            "polled_messages",
            "Messages in Iggy's answers to the polls of Fetch reads and offset scans \
             (a message polled twice counts twice)",
            self.polled_messages.clone(),
        );
        reg.register_with_unit(
            "polled",
            "Payload and user-header bytes of those messages",
            Unit::Bytes,
            self.polled_bytes.clone(),
        );
        self.compaction.register(reg);
        reg.register(
            "meta_records_refused",
            "Records of the meta stream ignored because they carry no valid proof that a \
             gateway wrote them (reason: unsigned, forged, stale), by log",
            self.meta_refused.clone(),
        );
    }

    /// Counts one meta record ignored for want of a valid proof.
    pub(crate) fn record_meta_refused(&self, log: &str, reason: &'static str) {
        // Log names are the bridge's own (a bounded set), never a client's.
        self.meta_refused
            .get_or_create(&RefusedLabel {
                log: log.to_owned(),
                reason,
            })
            .inc();
        self.meta_refused_total.inc();
    }

    /// Meta records ignored so far for want of a valid proof, over every log.
    pub(crate) fn meta_refused(&self) -> u64 {
        self.meta_refused_total.get()
    }

    /// Counts one poll answer of a read or scan.
    pub(crate) fn record_poll(&self, messages: usize, bytes: usize) {
        self.polled_messages.inc_by(messages as u64);
        self.polled_bytes.inc_by(bytes as u64);
    }

    /// Messages polled so far (see [`IggyMetrics::record_poll`]).
    pub(crate) fn polled_messages(&self) -> u64 {
        self.polled_messages.get()
    }

    /// Runs one round trip and records it.
    pub(crate) async fn observe<T>(
        &self,
        op: Op,
        fut: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let started = Instant::now();
        let result = fut.await;
        let l = label(op);
        self.requests.get_or_create(&l).inc();
        self.latency
            .get_or_create(&l)
            .observe(started.elapsed().as_secs_f64());
        if result.is_err() {
            self.errors.get_or_create(&l).inc();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_store::StoreError;

    #[tokio::test]
    async fn counts_round_trips_errors_and_latency_by_op() {
        let m = IggyMetrics::default();
        let mut reg = Registry::default();
        m.register(&mut reg);
        m.observe(Op::Read, async { Ok(()) }).await.unwrap();
        m.observe(Op::Read, async { Ok(()) }).await.unwrap();
        let _ = m
            .observe(Op::Write, async {
                Err::<(), _>(StoreError::Internal("x".into()))
            })
            .await;
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for line in [
            "kafka_gateway_iggy_requests_total{op=\"read\"} 2",
            "kafka_gateway_iggy_requests_total{op=\"write\"} 1",
            "kafka_gateway_iggy_request_errors_total{op=\"write\"} 1",
            "kafka_gateway_iggy_request_duration_seconds_count{op=\"read\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("request_errors_total{op=\"read\"}"));
    }

    #[test]
    fn polled_messages_and_bytes_are_exported() {
        let m = IggyMetrics::default();
        let mut reg = Registry::default();
        m.register(&mut reg);
        m.record_poll(3, 300);
        m.record_poll(2, 20);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for line in [
            "kafka_gateway_iggy_polled_messages_total 5",
            "kafka_gateway_iggy_polled_bytes_total 320",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert_eq!(m.polled_messages(), 5);
    }

    #[test]
    fn compaction_figures_are_exported() {
        let m = IggyMetrics::default();
        let mut reg = Registry::default();
        m.register(&mut reg);
        m.compaction.record_pass(1000, 7);
        m.compaction.record_reclaimed(4096);
        m.compaction.observe_dirty_ratio(0.25);
        m.compaction.record_failures(2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for line in [
            "kafka_gateway_iggy_compaction_passes_total 1",
            "kafka_gateway_iggy_compaction_failures_total 2",
            "kafka_gateway_iggy_compaction_cleaned_bytes_total 1000",
            "kafka_gateway_iggy_compaction_records_removed_total 7",
            "kafka_gateway_iggy_compaction_reclaimed_bytes_total 4096",
            "kafka_gateway_iggy_compaction_dirty_ratio 0.25",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert_eq!(m.compaction.reclaimed(), 4096);
    }
}
