//! Resource bounds of the broker: connections, frame and buffer sizes, pipelining depth,
//! topic and fetch limits, produced batch limits, request entry caps, committed offsets,
//! connections per address and their creation rate, request memory shares and queued
//! response bytes, produce checks, producer state and the validation pool.
//!
//! Every rule on them is the broker's own ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check));
//! this section only reads the values and says which key fills which field.

use super::values::{duration_ms, parsed};
use kafka_broker::Limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
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
    max_entries_per_request: usize,
    #[serde(deserialize_with = "parsed")]
    max_decode_entries: usize,
    #[serde(deserialize_with = "parsed")]
    max_groups_with_offsets: usize,
    #[serde(deserialize_with = "parsed")]
    offsets_retention_ms: u64,
    #[serde(deserialize_with = "parsed")]
    max_connections_per_ip: usize,
    #[serde(deserialize_with = "parsed")]
    max_connections_per_ip_overrides: IpOverrides,
    #[serde(deserialize_with = "parsed")]
    max_connection_creation_rate: u32,
    #[serde(deserialize_with = "parsed")]
    max_buffered_request_bytes_per_ip: usize,
    #[serde(deserialize_with = "parsed")]
    max_buffered_request_bytes_per_connection: usize,
    #[serde(deserialize_with = "parsed")]
    small_request_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    small_request_reserve_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_queued_response_bytes_per_connection: usize,
    #[serde(deserialize_with = "parsed")]
    max_queued_response_bytes: usize,
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
    producer_state_recovery_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_concurrent_producer_recoveries: usize,
    #[serde(deserialize_with = "parsed")]
    producer_state_recovery_lag_wait_ms: u64,
    #[serde(deserialize_with = "parsed")]
    validation_threads: usize,
    #[serde(deserialize_with = "parsed")]
    inline_validation_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    frame_pool_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    frame_pool_idle_ms: u64,
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
            max_entries_per_request,
            max_decode_entries,
            max_groups_with_offsets,
            offsets_retention,
            max_connections_per_ip,
            max_connections_per_ip_overrides,
            max_connection_creation_rate,
            max_buffered_request_bytes_per_ip,
            max_buffered_request_bytes_per_connection,
            small_request_bytes,
            small_request_reserve_bytes,
            max_queued_response_bytes_per_connection,
            max_queued_response_bytes,
            max_produce_timeout,
            message_timestamp_before_max_ms,
            message_timestamp_after_max_ms,
            producer_id_expiration,
            max_producer_states,
            producer_state_recovery_bytes,
            max_concurrent_producer_recoveries,
            producer_state_recovery_lag_wait,
            validation_threads,
            inline_validation_bytes,
            frame_pool_bytes,
            frame_pool_idle,
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
            max_entries_per_request,
            max_decode_entries,
            max_groups_with_offsets,
            offsets_retention_ms: duration_ms(offsets_retention),
            max_connections_per_ip,
            max_connections_per_ip_overrides: IpOverrides(max_connections_per_ip_overrides),
            max_connection_creation_rate,
            max_buffered_request_bytes_per_ip,
            max_buffered_request_bytes_per_connection,
            small_request_bytes,
            small_request_reserve_bytes,
            max_queued_response_bytes_per_connection,
            max_queued_response_bytes,
            max_produce_timeout_ms: duration_ms(max_produce_timeout),
            message_timestamp_before_max_ms,
            message_timestamp_after_max_ms,
            producer_id_expiration_ms: duration_ms(producer_id_expiration),
            max_producer_states,
            producer_state_recovery_bytes,
            max_concurrent_producer_recoveries,
            producer_state_recovery_lag_wait_ms: duration_ms(producer_state_recovery_lag_wait),
            validation_threads,
            inline_validation_bytes,
            frame_pool_bytes,
            frame_pool_idle_ms: duration_ms(frame_pool_idle),
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
    ("limits.max_entries_per_request", "max_entries_per_request"),
    ("limits.max_decode_entries", "max_decode_entries"),
    ("limits.max_groups_with_offsets", "max_groups_with_offsets"),
    ("limits.offsets_retention", "offsets_retention_ms"),
    ("limits.max_connections_per_ip", "max_connections_per_ip"),
    (
        "limits.max_connections_per_ip_overrides",
        "max_connections_per_ip_overrides",
    ),
    (
        "limits.max_connection_creation_rate",
        "max_connection_creation_rate",
    ),
    (
        "limits.max_buffered_request_bytes_per_ip",
        "max_buffered_request_bytes_per_ip",
    ),
    (
        "limits.max_buffered_request_bytes_per_connection",
        "max_buffered_request_bytes_per_connection",
    ),
    ("limits.small_request_bytes", "small_request_bytes"),
    (
        "limits.small_request_reserve_bytes",
        "small_request_reserve_bytes",
    ),
    (
        "limits.max_queued_response_bytes_per_connection",
        "max_queued_response_bytes_per_connection",
    ),
    (
        "limits.max_queued_response_bytes",
        "max_queued_response_bytes",
    ),
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
    (
        "limits.producer_state_recovery_bytes",
        "producer_state_recovery_bytes",
    ),
    (
        "limits.max_concurrent_producer_recoveries",
        "max_concurrent_producer_recoveries",
    ),
    (
        "limits.producer_state_recovery_lag_wait",
        "producer_state_recovery_lag_wait_ms",
    ),
    ("limits.validation_threads", "validation_threads"),
    ("limits.inline_validation_bytes", "inline_validation_bytes"),
    ("limits.frame_pool_bytes", "frame_pool_bytes"),
    ("limits.frame_pool_idle_ms", "frame_pool_idle_ms"),
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
            max_entries_per_request: self.max_entries_per_request,
            max_decode_entries: self.max_decode_entries,
            max_groups_with_offsets: self.max_groups_with_offsets,
            offsets_retention: Duration::from_millis(self.offsets_retention_ms),
            max_connections_per_ip: self.max_connections_per_ip,
            max_connections_per_ip_overrides: self.max_connections_per_ip_overrides.0,
            max_connection_creation_rate: self.max_connection_creation_rate,
            max_buffered_request_bytes_per_ip: self.max_buffered_request_bytes_per_ip,
            max_buffered_request_bytes_per_connection: self
                .max_buffered_request_bytes_per_connection,
            small_request_bytes: self.small_request_bytes,
            small_request_reserve_bytes: self.small_request_reserve_bytes,
            max_queued_response_bytes_per_connection: self.max_queued_response_bytes_per_connection,
            max_queued_response_bytes: self.max_queued_response_bytes,
            max_produce_timeout: Duration::from_millis(self.max_produce_timeout_ms),
            message_timestamp_before_max_ms: self.message_timestamp_before_max_ms,
            message_timestamp_after_max_ms: self.message_timestamp_after_max_ms,
            producer_id_expiration: Duration::from_millis(self.producer_id_expiration_ms),
            max_producer_states: self.max_producer_states,
            producer_state_recovery_bytes: self.producer_state_recovery_bytes,
            max_concurrent_producer_recoveries: self.max_concurrent_producer_recoveries,
            producer_state_recovery_lag_wait: Duration::from_millis(
                self.producer_state_recovery_lag_wait_ms,
            ),
            validation_threads: self.validation_threads,
            inline_validation_bytes: self.inline_validation_bytes,
            frame_pool_bytes: self.frame_pool_bytes,
            frame_pool_idle: Duration::from_millis(self.frame_pool_idle_ms),
            max_decompressed_request_bytes: self.max_decompressed_request_bytes,
            max_list_offsets_partitions: self.max_list_offsets_partitions,
        };
    }
}

/// `max_connections_per_ip_overrides`: `IP:N` pairs separated by commas, as Kafka's
/// `max.connections.per.ip.overrides` (`10.0.0.1:50,[::1]:200`; an empty value has none).
/// The count follows the last colon, so bare IPv6 addresses work too (`::1:200`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct IpOverrides(BTreeMap<IpAddr, usize>);

impl FromStr for IpOverrides {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut map = BTreeMap::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("{pair:?} is not IP:COUNT");
            let (ip, n) = pair.rsplit_once(':').ok_or_else(bad)?;
            let ip = ip.trim().trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = ip.parse().map_err(|_| bad())?;
            let n: usize = n.trim().parse().map_err(|_| bad())?;
            if map.insert(ip, n).is_some() {
                return Err(format!("{ip} is given twice"));
            }
        }
        Ok(IpOverrides(map))
    }
}

impl fmt::Display for IpOverrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (ip, n) in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match ip {
                IpAddr::V4(v4) => write!(f, "{v4}:{n}")?,
                IpAddr::V6(v6) => write!(f, "[{v6}]:{n}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
impl serde::Serialize for IpOverrides {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Unset by default: the docs describe it in words.
        if self.0.is_empty() {
            s.serialize_none()
        } else {
            s.collect_str(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use super::super::tests::{env, load_err};
    use super::IpOverrides;

    #[test]
    fn connection_overrides_are_ip_count_pairs() {
        let parsed: IpOverrides = "10.0.0.1:5, [::1]:7,::2:0,".parse().unwrap();
        assert_eq!(parsed.to_string(), "10.0.0.1:5,[::1]:7,[::2]:0");
        assert_eq!(parsed.to_string().parse::<IpOverrides>().unwrap(), parsed);
        assert_eq!("".parse::<IpOverrides>().unwrap(), IpOverrides::default());
        for bad in ["10.0.0.1", "host:5", "10.0.0.1:-1", "10.0.0.1:1,10.0.0.1:2"] {
            assert!(bad.parse::<IpOverrides>().is_err(), "{bad}");
        }
        let config = load(
            None,
            env(&[
                ("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP_OVERRIDES", "127.0.0.2:3"),
                ("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP", "9"),
                ("IGGY_KAFKA_MAX_CONNECTION_CREATION_RATE", "50"),
                (
                    "IGGY_KAFKA_MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION",
                    "4096",
                ),
            ]),
        )
        .unwrap();
        let l = &config.broker.limits;
        assert_eq!(
            l.max_connections_per_ip_overrides
                .get(&"127.0.0.2".parse().unwrap()),
            Some(&3)
        );
        assert_eq!(l.max_connections_per_ip, 9);
        assert_eq!(l.max_connection_creation_rate, 50);
        assert_eq!(l.max_queued_response_bytes_per_connection, 4096);
        let message = load_err(
            None,
            &[("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP_OVERRIDES", "x:1")],
        );
        assert!(
            message.starts_with("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP_OVERRIDES="),
            "{message}"
        );
        let message = load_err(None, &[("IGGY_KAFKA_SMALL_REQUEST_RESERVE_BYTES", "1")]);
        assert!(
            message.starts_with("IGGY_KAFKA_SMALL_REQUEST_RESERVE_BYTES=\"1\": must hold"),
            "{message}"
        );
    }
}
