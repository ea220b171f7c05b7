//! Client quotas: the default rates for client ids without a quota of their own (Kafka's
//! default client-id quotas), how usage is measured (`quota.window.num`,
//! `quota.window.size.seconds`) and the bounds on quota state.
//!
//! The rules are the broker's own ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check)).

use super::values::{duration_ms, parsed};
use kafka_broker::quotas::QuotaConfig;
use serde::Deserialize;
use std::time::Duration;

/// The quota settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    quota_producer_byte_rate: u64,
    #[serde(deserialize_with = "parsed")]
    quota_consumer_byte_rate: u64,
    #[serde(deserialize_with = "parsed")]
    quota_request_percentage: f64,
    #[serde(deserialize_with = "parsed")]
    quota_window_num: usize,
    #[serde(deserialize_with = "parsed")]
    quota_window_size_ms: u64,
    #[serde(deserialize_with = "parsed")]
    quota_max_tracked_clients: usize,
    #[serde(deserialize_with = "parsed")]
    quota_max_entities: usize,
    #[serde(deserialize_with = "parsed")]
    quota_alter_enabled: bool,
}

impl Default for Raw {
    fn default() -> Self {
        let QuotaConfig {
            producer_byte_rate,
            consumer_byte_rate,
            request_percentage,
            window_samples,
            window_size,
            max_tracked_clients,
            max_entities,
            alter_enabled,
        } = QuotaConfig::default();
        Raw {
            quota_producer_byte_rate: producer_byte_rate,
            quota_consumer_byte_rate: consumer_byte_rate,
            quota_request_percentage: request_percentage,
            quota_window_num: window_samples,
            quota_window_size_ms: duration_ms(window_size),
            quota_max_tracked_clients: max_tracked_clients,
            quota_max_entities: max_entities,
            quota_alter_enabled: alter_enabled,
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("quotas.producer_byte_rate", "quota_producer_byte_rate"),
    ("quotas.consumer_byte_rate", "quota_consumer_byte_rate"),
    ("quotas.request_percentage", "quota_request_percentage"),
    ("quotas.window_samples", "quota_window_num"),
    ("quotas.window_size", "quota_window_size_ms"),
    ("quotas.max_tracked_clients", "quota_max_tracked_clients"),
    ("quotas.max_entities", "quota_max_entities"),
    ("quotas.alter_enabled", "quota_alter_enabled"),
];

impl Raw {
    /// Writes the values into the broker's quota settings.
    pub(super) fn apply(self, quotas: &mut QuotaConfig) {
        *quotas = QuotaConfig {
            producer_byte_rate: self.quota_producer_byte_rate,
            consumer_byte_rate: self.quota_consumer_byte_rate,
            request_percentage: self.quota_request_percentage,
            window_samples: self.quota_window_num,
            window_size: Duration::from_millis(self.quota_window_size_ms),
            max_tracked_clients: self.quota_max_tracked_clients,
            max_entities: self.quota_max_entities,
            alter_enabled: self.quota_alter_enabled,
        };
    }
}
