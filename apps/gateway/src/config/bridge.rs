//! The Apache Iggy bridge: whether it is on, how to reach and sign in to Iggy, where topics
//! live and how calls are batched and bounded.
//!
//! The rules are the bridge's own ([`BridgeConfig::validate`]); this section fills the
//! config, names the setting the bridge complains about, and warns about bridge settings
//! given while the bridge is off.

use super::values::{duration_ms, parsed, parsed_opt, verbatim_opt};
use super::{ConfigError, Names};
use iggy_kafka_bridge::{BridgeConfig, BridgeError};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The bridge settings as read from the layers.
// No `Debug`: it would print the Iggy password.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    bridge_enabled: bool,
    #[serde(deserialize_with = "parsed")]
    iggy_addr: String,
    #[serde(deserialize_with = "parsed")]
    iggy_username: String,
    #[serde(deserialize_with = "verbatim_opt")]
    iggy_password: Option<String>,
    #[serde(deserialize_with = "parsed")]
    iggy_stream: String,
    #[serde(deserialize_with = "parsed_opt")]
    topic_map_path: Option<PathBuf>,
    #[serde(deserialize_with = "parsed")]
    iggy_sessions: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_call_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_metadata_max_age_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_poll_batch_messages: u32,
    #[serde(deserialize_with = "parsed")]
    iggy_read_ahead_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_send_batch_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_send_queue_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_send_queue_appends: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_send_queue_wait_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_send_buffer_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_poll_max_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_dedup_producers: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_meta_snapshot_records: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_meta_refresh_interval_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_meta_record_max_bytes: usize,
    #[serde(deserialize_with = "verbatim_opt")]
    iggy_meta_secret: Option<String>,
    #[serde(deserialize_with = "verbatim_opt")]
    iggy_meta_previous_secret: Option<String>,
    #[serde(deserialize_with = "parsed")]
    iggy_meta_max_skew_ms: u64,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_meta_unsigned_before_ms: Option<u64>,
    #[serde(deserialize_with = "parsed")]
    iggy_tls_enabled: bool,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_tls_domain: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_tls_ca_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed")]
    iggy_plain_cache_ttl_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_plain_cache_entries: usize,
    #[serde(deserialize_with = "parsed")]
    iggy_permissions_refresh_ms: u64,
    #[serde(deserialize_with = "parsed")]
    iggy_permissions_cache_entries: usize,
}

impl Default for Raw {
    fn default() -> Self {
        let bridge = BridgeConfig::default();
        Raw {
            bridge_enabled: false,
            iggy_addr: bridge.address,
            iggy_username: bridge.username,
            iggy_password: None,
            iggy_stream: bridge.stream,
            topic_map_path: bridge.topic_map_path,
            iggy_sessions: bridge.sessions,
            iggy_call_timeout_ms: duration_ms(bridge.call_timeout),
            iggy_metadata_max_age_ms: duration_ms(bridge.metadata_max_age),
            iggy_poll_batch_messages: bridge.poll_batch_messages,
            iggy_read_ahead_bytes: bridge.read_ahead_bytes,
            iggy_send_batch_bytes: bridge.send_batch_bytes,
            iggy_send_queue_bytes: bridge.send_queue_bytes,
            iggy_send_queue_appends: bridge.send_queue_appends,
            iggy_send_queue_wait_ms: duration_ms(bridge.send_queue_wait),
            iggy_send_buffer_bytes: bridge.send_buffer_bytes,
            iggy_poll_max_bytes: bridge.poll_max_bytes,
            iggy_dedup_producers: bridge.dedup_producers,
            iggy_meta_snapshot_records: bridge.meta_snapshot_records,
            iggy_meta_refresh_interval_ms: duration_ms(bridge.meta_refresh_interval),
            iggy_meta_record_max_bytes: bridge.meta_record_max_bytes,
            iggy_meta_secret: None,
            iggy_meta_previous_secret: None,
            iggy_meta_max_skew_ms: duration_ms(bridge.meta_max_skew),
            iggy_meta_unsigned_before_ms: None,
            iggy_tls_enabled: bridge.tls_enabled,
            iggy_tls_domain: bridge.tls_domain,
            iggy_tls_ca_file: bridge.tls_ca_file,
            iggy_plain_cache_ttl_ms: duration_ms(bridge.plain_cache_ttl),
            iggy_plain_cache_entries: bridge.plain_cache_entries,
            iggy_permissions_refresh_ms: duration_ms(bridge.permissions_refresh),
            iggy_permissions_cache_entries: bridge.permissions_cache_entries,
        }
    }
}

/// The settings that only matter with the bridge on.
const BRIDGE_ONLY: [&str; 31] = [
    "iggy_addr",
    "iggy_username",
    "iggy_password",
    "iggy_stream",
    "topic_map_path",
    "iggy_sessions",
    "iggy_call_timeout_ms",
    "iggy_metadata_max_age_ms",
    "iggy_poll_batch_messages",
    "iggy_read_ahead_bytes",
    "iggy_send_batch_bytes",
    "iggy_send_queue_bytes",
    "iggy_send_queue_appends",
    "iggy_send_queue_wait_ms",
    "iggy_send_buffer_bytes",
    "iggy_poll_max_bytes",
    "iggy_dedup_producers",
    "iggy_meta_snapshot_records",
    "iggy_meta_refresh_interval_ms",
    "iggy_meta_record_max_bytes",
    "iggy_meta_secret",
    "iggy_meta_previous_secret",
    "iggy_meta_max_skew_ms",
    "iggy_meta_unsigned_before_ms",
    "iggy_tls_enabled",
    "iggy_tls_domain",
    "iggy_tls_ca_file",
    "iggy_plain_cache_ttl_ms",
    "iggy_plain_cache_entries",
    "iggy_permissions_refresh_ms",
    "iggy_permissions_cache_entries",
];

/// [`BridgeConfig`] fields as its validation messages begin with them, and the key each
/// comes from. A message about any other field names `bridge_enabled`.
const BRIDGE_FIELDS: [(&str, &str); 29] = [
    ("address", "iggy_addr"),
    ("username", "iggy_username"),
    ("password", "iggy_password"),
    ("stream", "iggy_stream"),
    ("sessions", "iggy_sessions"),
    ("call_timeout", "iggy_call_timeout_ms"),
    ("metadata_max_age", "iggy_metadata_max_age_ms"),
    ("poll_batch_messages", "iggy_poll_batch_messages"),
    ("send_batch_bytes", "iggy_send_batch_bytes"),
    ("send_queue_bytes", "iggy_send_queue_bytes"),
    ("send_queue_appends", "iggy_send_queue_appends"),
    ("send_queue_wait", "iggy_send_queue_wait_ms"),
    ("send_buffer_bytes", "iggy_send_buffer_bytes"),
    ("poll_max_bytes", "iggy_poll_max_bytes"),
    ("dedup_producers", "iggy_dedup_producers"),
    ("meta_snapshot_records", "iggy_meta_snapshot_records"),
    ("meta_refresh_interval", "iggy_meta_refresh_interval_ms"),
    ("meta_record_max_bytes", "iggy_meta_record_max_bytes"),
    ("meta_secret", "iggy_meta_secret"),
    ("meta_previous_secret", "iggy_meta_previous_secret"),
    ("meta_max_skew", "iggy_meta_max_skew_ms"),
    ("meta_unsigned_before_ms", "iggy_meta_unsigned_before_ms"),
    ("tls_enabled", "iggy_tls_enabled"),
    ("tls_domain", "iggy_tls_domain"),
    ("tls_ca_file", "iggy_tls_ca_file"),
    ("plain_cache_ttl", "iggy_plain_cache_ttl_ms"),
    ("plain_cache_entries", "iggy_plain_cache_entries"),
    ("permissions_refresh", "iggy_permissions_refresh_ms"),
    (
        "permissions_cache_entries",
        "iggy_permissions_cache_entries",
    ),
];

/// The bridge's part of the configuration.
pub(super) struct Bridge {
    /// `None` while the bridge is off.
    pub config: Option<BridgeConfig>,
    /// Bridge settings given while the bridge is off.
    pub warnings: Vec<String>,
}

impl Raw {
    /// The bridge config if the bridge is on and accepts it, or the warnings for the
    /// settings that have no effect while it is off.
    pub(super) fn validate(self, names: &Names<'_>) -> Result<Bridge, ConfigError> {
        if !self.bridge_enabled {
            let warnings = BRIDGE_ONLY
                .iter()
                .filter(|key| names.is_set(key))
                .map(|key| {
                    format!(
                        "{} has no effect: the Iggy bridge is disabled",
                        names.ignored_name(key)
                    )
                })
                .collect();
            return Ok(Bridge {
                config: None,
                warnings,
            });
        }
        // The bridge either connects at start or the gateway does not start: it never
        // falls back to the embedded store, which would forget everything at exit. An unset
        // password stays empty, which the bridge refuses (there is no default).
        let mut bridge =
            BridgeConfig::new(self.iggy_username, self.iggy_password.unwrap_or_default());
        bridge.address = self.iggy_addr;
        bridge.stream = self.iggy_stream;
        bridge.topic_map_path = self.topic_map_path;
        bridge.sessions = self.iggy_sessions;
        bridge.call_timeout = Duration::from_millis(self.iggy_call_timeout_ms);
        bridge.metadata_max_age = Duration::from_millis(self.iggy_metadata_max_age_ms);
        bridge.poll_batch_messages = self.iggy_poll_batch_messages;
        bridge.read_ahead_bytes = self.iggy_read_ahead_bytes;
        bridge.send_batch_bytes = self.iggy_send_batch_bytes;
        bridge.send_queue_bytes = self.iggy_send_queue_bytes;
        bridge.send_queue_appends = self.iggy_send_queue_appends;
        bridge.send_queue_wait = Duration::from_millis(self.iggy_send_queue_wait_ms);
        bridge.send_buffer_bytes = self.iggy_send_buffer_bytes;
        bridge.poll_max_bytes = self.iggy_poll_max_bytes;
        bridge.dedup_producers = self.iggy_dedup_producers;
        bridge.meta_snapshot_records = self.iggy_meta_snapshot_records;
        bridge.meta_refresh_interval = Duration::from_millis(self.iggy_meta_refresh_interval_ms);
        bridge.meta_record_max_bytes = self.iggy_meta_record_max_bytes;
        bridge.meta_secret = self.iggy_meta_secret;
        bridge.meta_previous_secret = self.iggy_meta_previous_secret;
        bridge.meta_max_skew = Duration::from_millis(self.iggy_meta_max_skew_ms);
        bridge.meta_unsigned_before_ms = self.iggy_meta_unsigned_before_ms;
        bridge.tls_enabled = self.iggy_tls_enabled;
        bridge.tls_domain = self.iggy_tls_domain;
        bridge.tls_ca_file = self.iggy_tls_ca_file;
        bridge.plain_cache_ttl = Duration::from_millis(self.iggy_plain_cache_ttl_ms);
        bridge.plain_cache_entries = self.iggy_plain_cache_entries;
        bridge.permissions_refresh = Duration::from_millis(self.iggy_permissions_refresh_ms);
        bridge.permissions_cache_entries = self.iggy_permissions_cache_entries;
        bridge.validate().map_err(|e| bridge_error(&e, names))?;
        Ok(Bridge {
            config: Some(bridge),
            warnings: Vec::new(),
        })
    }
}

/// The bridge's refusal, named by the setting its message is about.
fn bridge_error(e: &BridgeError, names: &Names<'_>) -> ConfigError {
    let reason = match e {
        BridgeError::Config(reason) => reason.clone(),
        other => other.to_string(),
    };
    let field = reason.split(' ').next().unwrap_or_default();
    let key = BRIDGE_FIELDS
        .iter()
        .find(|(name, _)| *name == field)
        .map_or("bridge_enabled", |(_, key)| *key);
    names.invalid(key, &reason)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{env, load_err};
    use super::super::{Backend, load};
    use std::time::Duration;

    #[test]
    fn the_iggy_permission_settings_reach_the_bridge() {
        let on = ("IGGY_KAFKA_BRIDGE_ENABLED", "true");
        let password = ("IGGY_KAFKA_IGGY_PASSWORD", "p");
        let config = load(None, env(&[on, password])).unwrap();
        let Backend::Iggy(bridge) = &config.backend else {
            panic!("bridge expected")
        };
        assert_eq!(bridge.permissions_refresh, Duration::from_secs(10));
        assert_eq!(bridge.permissions_cache_entries, 10_000);
        assert_eq!(bridge.meta_refresh_interval, Duration::from_secs(1));
        assert_eq!(bridge.meta_record_max_bytes, 1 << 20);

        let config = load(
            None,
            env(&[
                on,
                password,
                ("IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS", "250"),
                ("IGGY_KAFKA_IGGY_PERMISSIONS_CACHE_ENTRIES", "3"),
                ("IGGY_KAFKA_IGGY_META_REFRESH_INTERVAL_MS", "40"),
                ("IGGY_KAFKA_IGGY_META_RECORD_MAX_BYTES", "65536"),
            ]),
        )
        .unwrap();
        let Backend::Iggy(bridge) = &config.backend else {
            panic!("bridge expected")
        };
        assert_eq!(bridge.permissions_refresh, Duration::from_millis(250));
        assert_eq!(bridge.permissions_cache_entries, 3);
        assert_eq!(bridge.meta_refresh_interval, Duration::from_millis(40));
        assert_eq!(bridge.meta_record_max_bytes, 65536);

        // Without the bridge they only warn.
        let config = load(
            None,
            env(&[("IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS", "250")]),
        )
        .unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.starts_with("IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS has no effect")),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn the_bridge_names_the_setting_it_refuses() {
        let on = ("IGGY_KAFKA_BRIDGE_ENABLED", "true");
        let password = ("IGGY_KAFKA_IGGY_PASSWORD", "p");
        for (var, value, rule) in [
            (
                "IGGY_KAFKA_IGGY_SESSIONS",
                "0",
                "sessions must be within 1..=64",
            ),
            ("IGGY_KAFKA_IGGY_SESSIONS", "65", "sessions must be within"),
            (
                "IGGY_KAFKA_IGGY_CALL_TIMEOUT_MS",
                "0",
                "call_timeout must be",
            ),
            (
                "IGGY_KAFKA_IGGY_METADATA_MAX_AGE_MS",
                "3600001",
                "metadata_max_age",
            ),
            (
                "IGGY_KAFKA_IGGY_POLL_BATCH_MESSAGES",
                "0",
                "poll_batch_messages",
            ),
            ("IGGY_KAFKA_IGGY_SEND_BATCH_BYTES", "0", "send_batch_bytes"),
            ("IGGY_KAFKA_IGGY_SEND_QUEUE_BYTES", "0", "send_queue_bytes"),
            (
                "IGGY_KAFKA_IGGY_SEND_QUEUE_APPENDS",
                "0",
                "send_queue_appends",
            ),
            (
                "IGGY_KAFKA_IGGY_SEND_QUEUE_WAIT_MS",
                "600001",
                "send_queue_wait",
            ),
            (
                "IGGY_KAFKA_IGGY_SEND_BUFFER_BYTES",
                "1",
                "send_buffer_bytes",
            ),
            ("IGGY_KAFKA_IGGY_POLL_MAX_BYTES", "0", "poll_max_bytes"),
            ("IGGY_KAFKA_IGGY_DEDUP_PRODUCERS", "0", "dedup_producers"),
            (
                "IGGY_KAFKA_IGGY_META_SNAPSHOT_RECORDS",
                "5",
                "meta_snapshot_records",
            ),
            (
                "IGGY_KAFKA_IGGY_META_REFRESH_INTERVAL_MS",
                "0",
                "meta_refresh_interval must be within",
            ),
            (
                "IGGY_KAFKA_IGGY_META_RECORD_MAX_BYTES",
                "100",
                "meta_record_max_bytes must be within",
            ),
            (
                "IGGY_KAFKA_IGGY_STREAM",
                "__kafka_gateway",
                "stream and meta_stream",
            ),
            (
                "IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS",
                "0",
                "permissions_refresh must be within",
            ),
            (
                "IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS",
                "3600001",
                "permissions_refresh must be within",
            ),
            (
                "IGGY_KAFKA_IGGY_PERMISSIONS_CACHE_ENTRIES",
                "0",
                "permissions_cache_entries must be within",
            ),
            (
                "IGGY_KAFKA_IGGY_PERMISSIONS_CACHE_ENTRIES",
                "1000001",
                "permissions_cache_entries must be within",
            ),
        ] {
            let message = load_err(None, &[on, password, (var, value)]);
            assert!(
                message.starts_with(&format!("{var}={value:?}: ")),
                "{var}: {message}"
            );
            assert!(message.contains(rule), "{var}: {message}");
        }
        let file = super::super::tests::toml_file("iggy_addr = \" \"\n");
        let message = load_err(Some(file.path()), &[on, password]);
        assert!(
            message.starts_with(&format!("iggy_addr in {}: ", file.path().display())),
            "{message}"
        );
    }
}
