//! Connection timeouts of the broker, in whole seconds (the close linger in milliseconds).
//!
//! The rules (above zero except the drain timeout, at most 7 days) are the broker's own
//! ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check)).

use super::values::parsed;
use kafka_broker::Timeouts;
use serde::Deserialize;
use std::time::Duration;

/// The timeout settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    idle_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    read_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    write_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    shutdown_drain_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    close_linger_ms: u64,
}

impl Default for Raw {
    fn default() -> Self {
        let timeouts = Timeouts::default();
        Raw {
            idle_timeout_secs: timeouts.idle.as_secs(),
            read_timeout_secs: timeouts.read.as_secs(),
            write_timeout_secs: timeouts.write.as_secs(),
            shutdown_drain_timeout_secs: timeouts.shutdown_drain.as_secs(),
            close_linger_ms: u64::try_from(timeouts.close_linger.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("timeouts.idle", "idle_timeout_secs"),
    ("timeouts.read", "read_timeout_secs"),
    ("timeouts.write", "write_timeout_secs"),
    ("timeouts.shutdown_drain", "shutdown_drain_timeout_secs"),
    ("timeouts.close_linger", "close_linger_ms"),
];

impl Raw {
    /// Writes the values into the broker's timeouts.
    pub(super) fn apply(self, timeouts: &mut Timeouts) {
        *timeouts = Timeouts {
            idle: Duration::from_secs(self.idle_timeout_secs),
            read: Duration::from_secs(self.read_timeout_secs),
            write: Duration::from_secs(self.write_timeout_secs),
            shutdown_drain: Duration::from_secs(self.shutdown_drain_timeout_secs),
            close_linger: Duration::from_millis(self.close_linger_ms),
        };
    }
}
