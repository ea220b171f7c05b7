//! The consumer-group coordinator: session and rebalance timeout bounds, the initial
//! rebalance delay, group and member limits (Kafka's `group.*` settings), and how long a
//! group request waits for its coordinator shard to load.
//!
//! The rules are the broker's own ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check)),
//! which checks the coordinator settings it carries.

use super::values::{duration_ms, parsed};
use kafka_broker::{GroupConfig, GroupStateSettings};
use serde::Deserialize;
use std::time::Duration;

/// The group settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    group_min_session_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    group_max_session_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    group_initial_rebalance_delay_ms: u64,
    #[serde(deserialize_with = "parsed")]
    group_max_groups: usize,
    #[serde(deserialize_with = "parsed")]
    group_max_members: usize,
    #[serde(deserialize_with = "parsed")]
    group_max_rebalance_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    group_max_id_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    group_max_state_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    group_max_pending_members: usize,
    #[serde(deserialize_with = "parsed")]
    group_load_wait_ms: u64,
}

impl Default for Raw {
    fn default() -> Self {
        let groups = GroupConfig::default();
        Raw {
            group_min_session_timeout_ms: duration_ms(groups.min_session_timeout),
            group_max_session_timeout_ms: duration_ms(groups.max_session_timeout),
            group_initial_rebalance_delay_ms: duration_ms(groups.initial_rebalance_delay),
            group_max_groups: groups.max_groups,
            group_max_members: groups.max_members_per_group,
            group_max_rebalance_timeout_ms: duration_ms(groups.max_rebalance_timeout),
            group_max_id_bytes: groups.max_id_bytes,
            group_max_state_bytes: groups.max_state_bytes,
            group_max_pending_members: groups.max_pending_members,
            group_load_wait_ms: duration_ms(GroupStateSettings::default().load_wait),
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("groups.min_session_timeout", "group_min_session_timeout_ms"),
    ("groups.max_session_timeout", "group_max_session_timeout_ms"),
    (
        "groups.initial_rebalance_delay",
        "group_initial_rebalance_delay_ms",
    ),
    ("groups.max_groups", "group_max_groups"),
    ("groups.max_members_per_group", "group_max_members"),
    (
        "groups.max_rebalance_timeout",
        "group_max_rebalance_timeout_ms",
    ),
    ("groups.max_id_bytes", "group_max_id_bytes"),
    ("groups.max_state_bytes", "group_max_state_bytes"),
    ("groups.max_pending_members", "group_max_pending_members"),
    ("group_state.load_wait", "group_load_wait_ms"),
];

impl Raw {
    /// Writes the values into the coordinator settings; the others (the member id seed
    /// among them) keep the broker's defaults.
    pub(super) fn apply(self, groups: &mut GroupConfig, state: &mut GroupStateSettings) {
        state.load_wait = Duration::from_millis(self.group_load_wait_ms);
        groups.min_session_timeout = Duration::from_millis(self.group_min_session_timeout_ms);
        groups.max_session_timeout = Duration::from_millis(self.group_max_session_timeout_ms);
        groups.initial_rebalance_delay =
            Duration::from_millis(self.group_initial_rebalance_delay_ms);
        groups.max_groups = self.group_max_groups;
        groups.max_members_per_group = self.group_max_members;
        groups.max_rebalance_timeout = Duration::from_millis(self.group_max_rebalance_timeout_ms);
        groups.max_id_bytes = self.group_max_id_bytes;
        groups.max_state_bytes = self.group_max_state_bytes;
        groups.max_pending_members = self.group_max_pending_members;
    }
}
