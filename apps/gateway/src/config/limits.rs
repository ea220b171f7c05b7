//! Resource bounds of the broker: connections, frame and buffer sizes, pipelining depth,
//! topic and fetch limits, produced batch limits, produce checks, producer state and the
//! validation pool.
//!
//! Every rule on them is the broker's own ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check));
//! this section only reads the values and says which key fills which field.

use super::values::{duration_ms, parsed};
use kafka_broker::Limits;
use serde::Deserialize;
use std::time::Duration;

/// The limit settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    max_connections: usize,
    #[serde(deserialize_with = "parsed")]
    max_frame_size: usize,
    #[serde(deserialize_with = "parsed")]
    max_buffered_request_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_in_flight_per_connection: usize,
    #[serde(deserialize_with = "parsed")]
    max_partitions_per_topic: i32,
    #[serde(deserialize_with = "parsed")]
    max_topics_per_request: usize,
    #[serde(deserialize_with = "parsed")]
    max_fetch_response_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_fetch_wait_ms: u64,
    #[serde(deserialize_with = "parsed")]
    max_decompressed_batch_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_records_per_batch: usize,
    #[serde(deserialize_with = "parsed")]
    max_produce_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    message_timestamp_before_max_ms: i64,
    #[serde(deserialize_with = "parsed")]
    message_timestamp_after_max_ms: i64,
    #[serde(deserialize_with = "parsed")]
    producer_id_expiration_ms: u64,
    #[serde(deserialize_with = "parsed")]
    max_producer_states: usize,
    #[serde(deserialize_with = "parsed")]
    validation_threads: usize,
    #[serde(deserialize_with = "parsed")]
    inline_validation_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_decompressed_request_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_list_offsets_partitions: usize,
}

impl Default for Raw {
    fn default() -> Self {
        let Limits {
            max_connections,
            max_frame_size,
            max_buffered_request_bytes,
            max_in_flight_per_connection,
            max_partitions_per_topic,
            max_topics_per_request,
            max_fetch_response_bytes,
            max_fetch_wait,
            max_decompressed_batch_bytes,
            max_records_per_batch,
            max_produce_timeout,
            message_timestamp_before_max_ms,
            message_timestamp_after_max_ms,
            producer_id_expiration,
            max_producer_states,
            validation_threads,
            inline_validation_bytes,
            max_decompressed_request_bytes,
            max_list_offsets_partitions,
        } = Limits::default();
        Raw {
            max_connections,
            max_frame_size,
            max_buffered_request_bytes,
            max_in_flight_per_connection,
            max_partitions_per_topic,
            max_topics_per_request,
            max_fetch_response_bytes,
            max_fetch_wait_ms: duration_ms(max_fetch_wait),
            max_decompressed_batch_bytes,
            max_records_per_batch,
            max_produce_timeout_ms: duration_ms(max_produce_timeout),
            message_timestamp_before_max_ms,
            message_timestamp_after_max_ms,
            producer_id_expiration_ms: duration_ms(producer_id_expiration),
            max_producer_states,
            validation_threads,
            inline_validation_bytes,
            max_decompressed_request_bytes,
            max_list_offsets_partitions,
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("limits.max_connections", "max_connections"),
    ("limits.max_frame_size", "max_frame_size"),
    (
        "limits.max_buffered_request_bytes",
        "max_buffered_request_bytes",
    ),
    (
        "limits.max_in_flight_per_connection",
        "max_in_flight_per_connection",
    ),
    (
        "limits.max_partitions_per_topic",
        "max_partitions_per_topic",
    ),
    ("limits.max_topics_per_request", "max_topics_per_request"),
    (
        "limits.max_fetch_response_bytes",
        "max_fetch_response_bytes",
    ),
    ("limits.max_fetch_wait", "max_fetch_wait_ms"),
    (
        "limits.max_decompressed_batch_bytes",
        "max_decompressed_batch_bytes",
    ),
    ("limits.max_records_per_batch", "max_records_per_batch"),
    ("limits.max_produce_timeout", "max_produce_timeout_ms"),
    (
        "limits.message_timestamp_before_max_ms",
        "message_timestamp_before_max_ms",
    ),
    (
        "limits.message_timestamp_after_max_ms",
        "message_timestamp_after_max_ms",
    ),
    ("limits.producer_id_expiration", "producer_id_expiration_ms"),
    ("limits.max_producer_states", "max_producer_states"),
    ("limits.validation_threads", "validation_threads"),
    ("limits.inline_validation_bytes", "inline_validation_bytes"),
    (
        "limits.max_decompressed_request_bytes",
        "max_decompressed_request_bytes",
    ),
    (
        "limits.max_list_offsets_partitions",
        "max_list_offsets_partitions",
    ),
];

impl Raw {
    /// Writes the values into the broker's limits.
    pub(super) fn apply(self, limits: &mut Limits) {
        *limits = Limits {
            max_connections: self.max_connections,
            max_frame_size: self.max_frame_size,
            max_buffered_request_bytes: self.max_buffered_request_bytes,
            max_in_flight_per_connection: self.max_in_flight_per_connection,
            max_partitions_per_topic: self.max_partitions_per_topic,
            max_topics_per_request: self.max_topics_per_request,
            max_fetch_response_bytes: self.max_fetch_response_bytes,
            max_fetch_wait: Duration::from_millis(self.max_fetch_wait_ms),
            max_decompressed_batch_bytes: self.max_decompressed_batch_bytes,
            max_records_per_batch: self.max_records_per_batch,
            max_produce_timeout: Duration::from_millis(self.max_produce_timeout_ms),
            message_timestamp_before_max_ms: self.message_timestamp_before_max_ms,
            message_timestamp_after_max_ms: self.message_timestamp_after_max_ms,
            producer_id_expiration: Duration::from_millis(self.producer_id_expiration_ms),
            max_producer_states: self.max_producer_states,
            validation_threads: self.validation_threads,
            inline_validation_bytes: self.inline_validation_bytes,
            max_decompressed_request_bytes: self.max_decompressed_request_bytes,
            max_list_offsets_partitions: self.max_list_offsets_partitions,
        };
    }
}
