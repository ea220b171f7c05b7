//! Transactions: the coordinator's bounds and timers (Kafka's `transaction.*` and
//! `transactional.id.*` settings), the partition side's rebuild bound, the backoff of
//! marker writes, and how long an add waits for its id's previous transaction to
//! complete. Keys `transaction_*`.
//!
//! The rules are the broker's own
//! ([`TransactionSettings::check`](kafka_broker::TransactionSettings::check)).

use super::values::{duration_ms, parsed};
use kafka_broker::TransactionSettings;
use serde::Deserialize;
use std::time::Duration;

/// The transaction settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    transaction_max_timeout_ms: i32,
    #[serde(deserialize_with = "parsed")]
    transaction_id_expiration_ms: i64,
    #[serde(deserialize_with = "parsed")]
    transaction_abort_check_interval_ms: i64,
    #[serde(deserialize_with = "parsed")]
    transaction_max_partitions_per_txn: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_max_transactional_ids: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_max_open_txns: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_index_rebuild_max_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_marker_retry_min_ms: u64,
    #[serde(deserialize_with = "parsed")]
    transaction_marker_retry_max_ms: u64,
    #[serde(deserialize_with = "parsed")]
    transaction_index_max_partitions: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_max_verification_guards: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_max_flagged_topics: usize,
    #[serde(deserialize_with = "parsed")]
    transaction_completion_wait_ms: u64,
}

impl Default for Raw {
    fn default() -> Self {
        let t = TransactionSettings::default();
        Raw {
            transaction_max_timeout_ms: t.coordinator.max_timeout_ms,
            transaction_id_expiration_ms: t.coordinator.id_expiration_ms,
            transaction_abort_check_interval_ms: t.coordinator.abort_check_interval_ms,
            transaction_max_partitions_per_txn: t.coordinator.max_partitions_per_txn,
            transaction_max_transactional_ids: t.coordinator.max_transactional_ids,
            transaction_max_open_txns: t.coordinator.max_open_txns,
            transaction_index_rebuild_max_bytes: t.txn_index_rebuild_max_bytes,
            transaction_marker_retry_min_ms: duration_ms(t.marker_retry_min),
            transaction_marker_retry_max_ms: duration_ms(t.marker_retry_max),
            transaction_index_max_partitions: t.txn_index_max_partitions,
            transaction_max_verification_guards: t.txn_max_verification_guards,
            transaction_max_flagged_topics: t.txn_max_flagged_topics,
            transaction_completion_wait_ms: duration_ms(t.completion_wait),
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    (
        "transactions.coordinator.max_timeout_ms",
        "transaction_max_timeout_ms",
    ),
    (
        "transactions.coordinator.id_expiration_ms",
        "transaction_id_expiration_ms",
    ),
    (
        "transactions.coordinator.abort_check_interval_ms",
        "transaction_abort_check_interval_ms",
    ),
    (
        "transactions.coordinator.max_partitions_per_txn",
        "transaction_max_partitions_per_txn",
    ),
    (
        "transactions.coordinator.max_transactional_ids",
        "transaction_max_transactional_ids",
    ),
    (
        "transactions.coordinator.max_open_txns",
        "transaction_max_open_txns",
    ),
    (
        "transactions.txn_index_rebuild_max_bytes",
        "transaction_index_rebuild_max_bytes",
    ),
    (
        "transactions.marker_retry_min",
        "transaction_marker_retry_min_ms",
    ),
    (
        "transactions.marker_retry_max",
        "transaction_marker_retry_max_ms",
    ),
    (
        "transactions.txn_index_max_partitions",
        "transaction_index_max_partitions",
    ),
    (
        "transactions.txn_max_verification_guards",
        "transaction_max_verification_guards",
    ),
    (
        "transactions.txn_max_flagged_topics",
        "transaction_max_flagged_topics",
    ),
    (
        "transactions.completion_wait",
        "transaction_completion_wait_ms",
    ),
];

impl Raw {
    /// Writes the values into the broker's transaction settings.
    pub(super) fn apply(self, t: &mut TransactionSettings) {
        t.coordinator.max_timeout_ms = self.transaction_max_timeout_ms;
        t.coordinator.id_expiration_ms = self.transaction_id_expiration_ms;
        t.coordinator.abort_check_interval_ms = self.transaction_abort_check_interval_ms;
        t.coordinator.max_partitions_per_txn = self.transaction_max_partitions_per_txn;
        t.coordinator.max_transactional_ids = self.transaction_max_transactional_ids;
        t.coordinator.max_open_txns = self.transaction_max_open_txns;
        t.txn_index_rebuild_max_bytes = self.transaction_index_rebuild_max_bytes;
        t.marker_retry_min = Duration::from_millis(self.transaction_marker_retry_min_ms);
        t.marker_retry_max = Duration::from_millis(self.transaction_marker_retry_max_ms);
        t.txn_index_max_partitions = self.transaction_index_max_partitions;
        t.txn_max_verification_guards = self.transaction_max_verification_guards;
        t.txn_max_flagged_topics = self.transaction_max_flagged_topics;
        t.completion_wait = Duration::from_millis(self.transaction_completion_wait_ms);
    }
}
