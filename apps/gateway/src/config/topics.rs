//! Topics created by the gateway: auto-creation and the settings of topics created without
//! their own (`retention.ms`, `retention.bytes`, `max.message.bytes`).
//!
//! The rules are the broker's own ([`BrokerConfig::check`]).

use super::values::parsed;
use kafka_broker::BrokerConfig;
use kafka_broker::store::TopicConfig;
use serde::Deserialize;

/// The topic settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    auto_create_topics_enabled: bool,
    #[serde(deserialize_with = "parsed")]
    auto_create_topics_partitions: i32,
    #[serde(deserialize_with = "parsed")]
    default_retention_ms: i64,
    #[serde(deserialize_with = "parsed")]
    default_retention_bytes: i64,
    #[serde(deserialize_with = "parsed")]
    default_max_message_bytes: i32,
}

impl Default for Raw {
    fn default() -> Self {
        let broker = BrokerConfig::default();
        let topic = broker.default_topic_config;
        Raw {
            auto_create_topics_enabled: broker.auto_create_topics,
            auto_create_topics_partitions: broker.auto_create_partitions,
            default_retention_ms: topic.retention_ms,
            default_retention_bytes: topic.retention_bytes,
            default_max_message_bytes: topic.max_message_bytes,
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("auto_create_topics", "auto_create_topics_enabled"),
    ("auto_create_partitions", "auto_create_topics_partitions"),
    ("default_topic_config.retention_ms", "default_retention_ms"),
    (
        "default_topic_config.retention_bytes",
        "default_retention_bytes",
    ),
    (
        "default_topic_config.max_message_bytes",
        "default_max_message_bytes",
    ),
];

impl Raw {
    /// Writes the values into the broker's config.
    pub(super) fn apply(self, broker: &mut BrokerConfig) {
        broker.auto_create_topics = self.auto_create_topics_enabled;
        broker.auto_create_partitions = self.auto_create_topics_partitions;
        broker.default_topic_config = TopicConfig {
            retention_ms: self.default_retention_ms,
            retention_bytes: self.default_retention_bytes,
            max_message_bytes: self.default_max_message_bytes,
            ..TopicConfig::default()
        };
    }
}
