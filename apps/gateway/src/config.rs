//! The gateway's configuration: three layers merged with figment, then validated.
//!
//! Layers, later ones win:
//!
//! 1. built-in defaults (the broker library's own defaults, so there is one source of truth);
//! 2. an optional TOML file (`--config <FILE>` or `IGGY_KAFKA_CONFIG`), flat keys in lower case;
//! 3. `IGGY_KAFKA_*` environment variables, the same keys in upper case with the prefix.
//!
//! Environment values are handed to serde as raw strings and parsed per field with
//! [`FromStr`]. figment's stock `Env` provider guesses types from the text instead, which
//! turns a password of `123456` into a number, `[x]` into an array and `"x"` into `x`; raw
//! strings keep every value exactly as written. An empty variable counts as unset, so
//! templated deployments can pass `IGGY_KAFKA_ADVERTISED_HOST=` without effect.
//!
//! An unknown key in the file is an error: the file is written for this program, so a
//! misspelt key is a mistake worth stopping for. An unknown `IGGY_KAFKA_*` variable is only
//! a warning: environments carry variables nobody wrote for the gateway (Kubernetes
//! injects `IGGY_KAFKA_PORT`, `IGGY_KAFKA_SERVICE_HOST`, ... for a Service named
//! `iggy-kafka`), and refusing to start there would make the gateway undeployable.
//!
//! Every error is one line naming the setting as the operator wrote it: the variable for
//! values from the environment, the key and file for values from a file.

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use iggy_kafka_bridge::BridgeConfig;
use kafka_broker::store::TopicConfig;
use kafka_broker::store::memory::MemoryStoreConfig;
use kafka_broker::{BrokerConfig, GroupConfig, Limits, Timeouts};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::collections::BTreeSet;
use std::fmt::{self, Display};
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Prefix of every environment variable the gateway reads.
pub const ENV_PREFIX: &str = "IGGY_KAFKA_";

/// The variable naming the TOML file; it selects a layer, it is not a setting itself.
pub const CONFIG_FILE_VAR: &str = "IGGY_KAFKA_CONFIG";

/// Longest timeout accepted, in seconds (7 days). Far beyond any sensible value, and it
/// keeps `Instant + timeout` arithmetic in the broker far away from overflow.
const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Longest cluster id accepted; Kafka's own are 22 characters.
const MAX_CLUSTER_ID_LEN: usize = 255;

/// A configuration the gateway refuses to start with. The message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    fn new(message: impl Into<String>) -> Self {
        ConfigError(message.into())
    }
}

/// Settings as read from the layers, before validation. Field names are the TOML keys;
/// upper-cased with [`ENV_PREFIX`] they are the environment variables.
// No `Debug`: it would print the Iggy password.
#[derive(Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
struct RawConfig {
    #[serde(deserialize_with = "parsed")]
    bind_addr: String,
    #[serde(deserialize_with = "parsed_opt")]
    advertised_host: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    advertised_port: Option<u16>,
    #[serde(deserialize_with = "parsed")]
    node_id: i32,
    #[serde(deserialize_with = "parsed")]
    cluster_id: String,
    #[serde(deserialize_with = "parsed")]
    instance_id: u16,

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
    idle_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    read_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    write_timeout_secs: u64,
    #[serde(deserialize_with = "parsed")]
    shutdown_drain_timeout_secs: u64,

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
    memory_max_total_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    memory_max_topics: usize,
    #[serde(deserialize_with = "parsed")]
    memory_retention_check_interval_ms: u64,

    #[serde(deserialize_with = "parsed")]
    bridge_enabled: bool,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_addr: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_username: Option<String>,
    #[serde(deserialize_with = "verbatim_opt")]
    iggy_password: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    iggy_stream: Option<String>,
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
}

impl Default for RawConfig {
    fn default() -> Self {
        let broker = BrokerConfig::default();
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
        } = broker.limits;
        let timeouts = broker.timeouts;
        let topic = broker.default_topic_config;
        let memory = MemoryStoreConfig::default();
        let groups = broker.groups;
        let bridge = BridgeConfig::default();
        RawConfig {
            bind_addr: "127.0.0.1:9093".into(),
            advertised_host: None,
            advertised_port: None,
            node_id: broker.node_id,
            cluster_id: broker.cluster_id,
            instance_id: broker.instance_id,
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
            idle_timeout_secs: timeouts.idle.as_secs(),
            read_timeout_secs: timeouts.read.as_secs(),
            write_timeout_secs: timeouts.write.as_secs(),
            shutdown_drain_timeout_secs: timeouts.shutdown_drain.as_secs(),
            auto_create_topics_enabled: broker.auto_create_topics,
            auto_create_topics_partitions: broker.auto_create_partitions,
            default_retention_ms: topic.retention_ms,
            default_retention_bytes: topic.retention_bytes,
            default_max_message_bytes: topic.max_message_bytes,
            group_min_session_timeout_ms: duration_ms(groups.min_session_timeout),
            group_max_session_timeout_ms: duration_ms(groups.max_session_timeout),
            group_initial_rebalance_delay_ms: duration_ms(groups.initial_rebalance_delay),
            group_max_groups: groups.max_groups,
            group_max_members: groups.max_members_per_group,
            memory_max_total_bytes: memory.max_total_bytes,
            memory_max_topics: memory.max_topics,
            memory_retention_check_interval_ms: duration_ms(memory.retention_check_interval),
            bridge_enabled: false,
            iggy_addr: None,
            iggy_username: None,
            iggy_password: None,
            iggy_stream: None,
            topic_map_path: None,
            iggy_sessions: bridge.sessions,
            iggy_call_timeout_ms: duration_ms(bridge.call_timeout),
            iggy_metadata_max_age_ms: duration_ms(bridge.metadata_max_age),
            iggy_poll_batch_messages: bridge.poll_batch_messages,
            iggy_read_ahead_bytes: bridge.read_ahead_bytes,
            iggy_send_batch_bytes: bridge.send_batch_bytes,
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Which backend serves the data.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Everything in process memory, lost at exit.
    Memory(MemoryStoreConfig),
    /// Apache Iggy, through the bridge (`IGGY_KAFKA_BRIDGE_ENABLED=true`).
    Iggy(Box<BridgeConfig>),
}

/// A validated configuration, ready to start the gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Address to bind.
    pub bind_addr: SocketAddr,
    /// Port announced to clients; `None` announces the port actually bound, which makes
    /// `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0` usable.
    pub advertised_port: Option<u16>,
    /// Broker settings; its advertised port is replaced at start (see
    /// [`GatewayConfig::broker_config`]).
    pub broker: BrokerConfig,
    /// The data backend.
    pub backend: Backend,
    /// The file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// Settings that were given but have no effect, one message each, to be logged as
    /// warnings once logging is up.
    pub warnings: Vec<String>,
}

impl GatewayConfig {
    /// The broker configuration for a listener bound to `bound_port`.
    pub fn broker_config(&self, bound_port: u16) -> BrokerConfig {
        BrokerConfig {
            advertised_port: self.advertised_port.unwrap_or(bound_port),
            ..self.broker.clone()
        }
    }
}

/// Where a setting's value came from; used to name it in errors the way it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Default,
    File,
    Env,
}

/// Knows which layer supplied each key, and names keys accordingly.
struct Names<'a> {
    file: Option<&'a Path>,
    file_keys: BTreeSet<String>,
    env: Vec<(String, String)>,
}

impl Names<'_> {
    fn origin(&self, key: &str) -> Origin {
        if self.env.iter().any(|(k, _)| k == key) {
            Origin::Env
        } else if self.file_keys.contains(key) {
            Origin::File
        } else {
            Origin::Default
        }
    }

    /// The setting as the operator wrote it, for error messages.
    fn name(&self, key: &str) -> String {
        match (self.origin(key), self.file) {
            (Origin::Env, _) => {
                let value = self
                    .env
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or("", |(_, v)| v.as_str());
                format!("{}={value:?}", env_name(key))
            }
            (Origin::File, Some(path)) => format!("{key} in {}", path.display()),
            _ => format!("{} (default)", env_name(key)),
        }
    }

    fn is_set(&self, key: &str) -> bool {
        self.origin(key) != Origin::Default
    }

    /// A bridge-only setting, named for the "has no effect" warning.
    fn ignored_name(&self, key: &str) -> String {
        match (self.origin(key), self.file) {
            (Origin::File, Some(path)) => format!("{key} in {}", path.display()),
            _ => env_name(key),
        }
    }
}

/// `max_connections` -> `IGGY_KAFKA_MAX_CONNECTIONS`.
pub fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// Every setting's key, in declaration order, read from [`RawConfig`]'s serde derive so
/// the list cannot drift from the struct.
pub fn keys() -> &'static [&'static str] {
    struct Probe;
    #[derive(Debug)]
    struct ProbeError(Option<&'static [&'static str]>);
    impl fmt::Display for ProbeError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for ProbeError {}
    impl de::Error for ProbeError {
        fn custom<T: Display>(_: T) -> Self {
            ProbeError(None)
        }
    }
    impl<'de> Deserializer<'de> for Probe {
        type Error = ProbeError;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
            Err(ProbeError(None))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, ProbeError> {
            Err(ProbeError(Some(fields)))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    match RawConfig::deserialize(Probe) {
        Err(ProbeError(Some(fields))) => fields,
        _ => &[],
    }
}

/// The environment layer: `IGGY_KAFKA_*` variables as raw strings.
struct EnvLayer<'a>(&'a [(String, String)]);

impl Provider for EnvLayer<'_> {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment variable")
            .interpolater(|_, path| path.iter().map(|k| env_name(k)).collect())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict: Dict = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        Ok(Profile::Default.collect(dict))
    }
}

/// Picks the gateway's variables out of the process environment: prefix stripped, key in
/// lower case, empty values dropped. [`CONFIG_FILE_VAR`] is not a setting and is skipped.
pub fn settings_from_env<I, K, V>(vars: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut settings: Vec<(String, String)> = vars
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.as_ref();
            let key = name.strip_prefix(ENV_PREFIX)?;
            if name == CONFIG_FILE_VAR || value.as_ref().trim().is_empty() {
                return None;
            }
            Some((key.to_ascii_lowercase(), value.as_ref().to_string()))
        })
        .collect();
    settings.sort();
    settings
}

/// Reads and validates the configuration from an optional TOML file and the gateway's
/// environment settings (see [`settings_from_env`]).
pub fn load(file: Option<&Path>, env: Vec<(String, String)>) -> Result<GatewayConfig, ConfigError> {
    let known = keys();
    let (env, unknown_env): (Vec<_>, Vec<_>) = env
        .into_iter()
        .partition(|(k, _)| known.contains(&k.as_str()));
    let mut warnings: Vec<String> = unknown_env
        .iter()
        .map(|(key, _)| {
            format!(
                "{} is not a setting of this gateway and is ignored (see docs/configuration.md)",
                env_name(key)
            )
        })
        .collect();

    let mut figment = Figment::new();
    let mut file_keys = BTreeSet::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let toml = Toml::string(&text);
        let data = toml.data().map_err(|e| {
            ConfigError::new(format!(
                "config file {} is not valid TOML: {}",
                path.display(),
                one_line(&e.kind.to_string())
            ))
        })?;
        for key in data.values().flat_map(|dict| dict.keys()) {
            if !known.contains(&key.as_str()) {
                let hint = if known.contains(&key.to_ascii_lowercase().as_str()) {
                    " (keys are lower case)"
                } else {
                    ""
                };
                return Err(ConfigError::new(format!(
                    "unknown key {key:?} in config file {}{hint}; the supported ones are listed in docs/configuration.md",
                    path.display()
                )));
            }
            file_keys.insert(key.clone());
        }
        figment = figment.merge(toml);
    }
    figment = figment.merge(EnvLayer(&env));

    let names = Names {
        file,
        file_keys,
        env,
    };
    let raw: RawConfig = figment.extract().map_err(|e| {
        let setting = e
            .path
            .first()
            .map_or_else(|| "configuration".to_string(), |key| names.name(key));
        ConfigError::new(format!("{setting}: {}", one_line(&e.kind.to_string())))
    })?;
    let mut config = validate(raw, &names)?;
    warnings.append(&mut config.warnings);
    config.warnings = warnings;
    Ok(config)
}

/// Multi-line messages (TOML parse errors draw a caret diagram) folded to their first and
/// last lines, which carry the position and the reason.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [only] => (*only).to_string(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

fn validate(raw: RawConfig, names: &Names<'_>) -> Result<GatewayConfig, ConfigError> {
    let fail = |key: &str, why: &str| Err(ConfigError::new(format!("{}: {why}", names.name(key))));

    let bind_addr: SocketAddr = match raw.bind_addr.trim().parse() {
        Ok(addr) => addr,
        Err(_) => {
            return fail(
                "bind_addr",
                "expected IP:PORT, e.g. 127.0.0.1:9093 or [::1]:9093",
            );
        }
    };

    let advertised_host = match raw.advertised_host.as_deref().map(str::trim) {
        Some(host) => {
            if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return fail("advertised_host", "must be a host name or IP address");
            }
            if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
                return fail(
                    "advertised_host",
                    "clients cannot connect to an unspecified address; give a reachable host",
                );
            }
            host.to_string()
        }
        None if bind_addr.ip().is_unspecified() => {
            return Err(ConfigError::new(format!(
                "{}: binding every interface ({}) needs IGGY_KAFKA_ADVERTISED_HOST set to the host clients should connect to",
                names.name("bind_addr"),
                bind_addr.ip()
            )));
        }
        None => bind_addr.ip().to_string(),
    };
    if raw.advertised_port == Some(0) {
        return fail("advertised_port", "must be between 1 and 65535");
    }

    if raw.node_id < 0 {
        return fail("node_id", "must be 0 or more");
    }
    let cluster_id = raw.cluster_id.trim().to_string();
    if cluster_id.is_empty()
        || cluster_id.len() > MAX_CLUSTER_ID_LEN
        || cluster_id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return fail(
            "cluster_id",
            "must be 1 to 255 characters without spaces or control characters",
        );
    }

    if raw.group_min_session_timeout_ms > raw.group_max_session_timeout_ms {
        return fail(
            "group_min_session_timeout_ms",
            "must not exceed group_max_session_timeout_ms",
        );
    }
    let at_least_one: [(&str, u64); 11] = [
        (
            "group_max_session_timeout_ms",
            raw.group_max_session_timeout_ms,
        ),
        ("group_max_groups", raw.group_max_groups as u64),
        ("group_max_members", raw.group_max_members as u64),
        ("max_connections", raw.max_connections as u64),
        (
            "max_in_flight_per_connection",
            raw.max_in_flight_per_connection as u64,
        ),
        ("max_topics_per_request", raw.max_topics_per_request as u64),
        (
            "max_fetch_response_bytes",
            raw.max_fetch_response_bytes as u64,
        ),
        ("max_records_per_batch", raw.max_records_per_batch as u64),
        ("memory_max_total_bytes", raw.memory_max_total_bytes as u64),
        ("memory_max_topics", raw.memory_max_topics as u64),
        (
            "memory_retention_check_interval_ms",
            raw.memory_retention_check_interval_ms,
        ),
    ];
    for (key, value) in at_least_one {
        if value == 0 {
            return fail(key, "must be at least 1");
        }
    }
    let i32_max = i32::MAX as usize;
    if raw.max_frame_size < 1024 || raw.max_frame_size > i32_max {
        return fail(
            "max_frame_size",
            "must be between 1024 and 2147483647 bytes",
        );
    }
    if raw.max_decompressed_batch_bytes == 0 || raw.max_decompressed_batch_bytes > i32_max {
        return fail(
            "max_decompressed_batch_bytes",
            "must be between 1 and 2147483647 bytes",
        );
    }
    if raw.max_records_per_batch > i32_max {
        return fail("max_records_per_batch", "must be at most 2147483647");
    }
    if raw.max_partitions_per_topic < 1 {
        return fail("max_partitions_per_topic", "must be at least 1");
    }
    if raw.auto_create_topics_partitions < 1
        || raw.auto_create_topics_partitions > raw.max_partitions_per_topic
    {
        return Err(ConfigError::new(format!(
            "{}: must be between 1 and the partition limit ({}, IGGY_KAFKA_MAX_PARTITIONS_PER_TOPIC)",
            names.name("auto_create_topics_partitions"),
            raw.max_partitions_per_topic
        )));
    }
    if raw.max_fetch_wait_ms > MAX_TIMEOUT_SECS * 1000 {
        return fail("max_fetch_wait_ms", "must be at most 604800000 (7 days)");
    }
    if raw.memory_retention_check_interval_ms > MAX_TIMEOUT_SECS * 1000 {
        return fail(
            "memory_retention_check_interval_ms",
            "must be at most 604800000 (7 days)",
        );
    }

    for (key, secs, zero_ok) in [
        ("idle_timeout_secs", raw.idle_timeout_secs, false),
        ("read_timeout_secs", raw.read_timeout_secs, false),
        ("write_timeout_secs", raw.write_timeout_secs, false),
        (
            "shutdown_drain_timeout_secs",
            raw.shutdown_drain_timeout_secs,
            true,
        ),
    ] {
        if secs == 0 && !zero_ok {
            return fail(key, "must be at least 1 second");
        }
        if secs > MAX_TIMEOUT_SECS {
            return fail(key, "must be at most 604800 seconds (7 days)");
        }
    }

    if raw.default_retention_ms == 0 || raw.default_retention_ms < -1 {
        return fail(
            "default_retention_ms",
            "must be -1 (keep forever) or at least 1",
        );
    }
    if raw.default_retention_bytes == 0 || raw.default_retention_bytes < -1 {
        return fail(
            "default_retention_bytes",
            "must be -1 (no size cap) or at least 1",
        );
    }
    if raw.default_max_message_bytes < 1 {
        return fail("default_max_message_bytes", "must be at least 1");
    }

    let bridge_keys = [
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
    ];
    let bridge = if raw.bridge_enabled {
        // The bridge either connects at start or the gateway does not start: it never
        // falls back to the embedded store, which would forget everything at exit.
        let Some(password) = raw.iggy_password.clone().filter(|p| !p.is_empty()) else {
            return fail(
                "iggy_password",
                "is required when the Iggy bridge is enabled (there is no default password)",
            );
        };
        let mut bridge = BridgeConfig::new(
            raw.iggy_username
                .clone()
                .unwrap_or_else(|| "iggy".to_string()),
            password,
        );
        if let Some(addr) = &raw.iggy_addr {
            bridge.address = addr.clone();
        }
        if let Some(stream) = &raw.iggy_stream {
            bridge.stream = stream.clone();
        }
        bridge.topic_map_path = raw.topic_map_path.clone();
        bridge.sessions = raw.iggy_sessions;
        bridge.call_timeout = Duration::from_millis(raw.iggy_call_timeout_ms);
        bridge.metadata_max_age = Duration::from_millis(raw.iggy_metadata_max_age_ms);
        bridge.poll_batch_messages = raw.iggy_poll_batch_messages;
        bridge.read_ahead_bytes = raw.iggy_read_ahead_bytes;
        bridge.send_batch_bytes = raw.iggy_send_batch_bytes;
        if let Err(e) = bridge.validate() {
            return fail("bridge_enabled", &e.to_string());
        }
        Some(bridge)
    } else {
        None
    };
    let warnings = bridge_keys
        .iter()
        .filter(|key| bridge.is_none() && names.is_set(key))
        .map(|key| {
            format!(
                "{} has no effect: the Iggy bridge is disabled",
                names.ignored_name(key)
            )
        })
        .collect();

    let broker = BrokerConfig {
        node_id: raw.node_id,
        cluster_id,
        advertised_host,
        // Placeholder until the listener is bound; see `GatewayConfig::broker_config`.
        advertised_port: raw.advertised_port.unwrap_or(match bind_addr.port() {
            0 => 9093,
            port => port,
        }),
        instance_id: raw.instance_id,
        auto_create_topics: raw.auto_create_topics_enabled,
        auto_create_partitions: raw.auto_create_topics_partitions,
        default_topic_config: TopicConfig {
            retention_ms: raw.default_retention_ms,
            retention_bytes: raw.default_retention_bytes,
            max_message_bytes: raw.default_max_message_bytes,
        },
        limits: Limits {
            max_connections: raw.max_connections,
            max_frame_size: raw.max_frame_size,
            max_buffered_request_bytes: raw.max_buffered_request_bytes,
            max_in_flight_per_connection: raw.max_in_flight_per_connection,
            max_partitions_per_topic: raw.max_partitions_per_topic,
            max_topics_per_request: raw.max_topics_per_request,
            max_fetch_response_bytes: raw.max_fetch_response_bytes,
            max_fetch_wait: Duration::from_millis(raw.max_fetch_wait_ms),
            max_decompressed_batch_bytes: raw.max_decompressed_batch_bytes,
            max_records_per_batch: raw.max_records_per_batch,
        },
        timeouts: Timeouts {
            idle: Duration::from_secs(raw.idle_timeout_secs),
            read: Duration::from_secs(raw.read_timeout_secs),
            write: Duration::from_secs(raw.write_timeout_secs),
            shutdown_drain: Duration::from_secs(raw.shutdown_drain_timeout_secs),
        },
        groups: GroupConfig {
            min_session_timeout: Duration::from_millis(raw.group_min_session_timeout_ms),
            max_session_timeout: Duration::from_millis(raw.group_max_session_timeout_ms),
            initial_rebalance_delay: Duration::from_millis(raw.group_initial_rebalance_delay_ms),
            max_groups: raw.group_max_groups,
            max_members_per_group: raw.group_max_members,
            ..BrokerConfig::default().groups
        },
    };
    // The checks above name the variable; this one is the broker's own last word, so a
    // rule added there cannot be bypassed by the gateway.
    broker
        .validate()
        .map_err(|e| ConfigError::new(e.to_string()))?;

    Ok(GatewayConfig {
        bind_addr,
        advertised_port: raw.advertised_port,
        broker,
        backend: match bridge {
            Some(b) => Backend::Iggy(Box::new(b)),
            None => Backend::Memory(MemoryStoreConfig {
                max_topics: raw.memory_max_topics,
                max_total_bytes: raw.memory_max_total_bytes,
                retention_check_interval: Duration::from_millis(
                    raw.memory_retention_check_interval_ms,
                ),
            }),
        },
        config_file: names.file.map(Path::to_path_buf),
        warnings,
    })
}

/// Deserializes any scalar through its text and [`FromStr`], so environment strings and
/// TOML numbers or booleans land in the same typed field.
fn parsed<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    deserializer.deserialize_any(TextVisitor {
        trim: true,
        target: PhantomData,
    })
}

/// Like [`parsed`] without trimming: for secrets, whose spaces may be meaningful.
fn verbatim_opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    deserializer
        .deserialize_any(TextVisitor {
            trim: false,
            target: PhantomData,
        })
        .map(Some)
}

fn parsed_opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    parsed(deserializer).map(Some)
}

struct TextVisitor<T> {
    trim: bool,
    target: PhantomData<T>,
}

impl<T> Visitor<'_> for TextVisitor<T>
where
    T: FromStr,
    T::Err: Display,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a single value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        let value = if self.trim { text.trim() } else { text };
        value
            .parse()
            .map_err(|e| E::custom(format!("{e} (expected {})", short_type_name::<T>())))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// `core::net::SocketAddr` -> `SocketAddr`, for "expected ..." hints.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        settings_from_env(pairs.iter().copied())
    }

    fn toml_file(contents: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(contents.as_bytes()).unwrap();
        file
    }

    fn load_err(file: Option<&Path>, pairs: &[(&str, &str)]) -> String {
        let message = load(file, env(pairs)).unwrap_err().to_string();
        assert!(!message.contains('\n'), "not one line: {message}");
        message
    }

    #[test]
    fn defaults_are_the_broker_defaults() {
        let config = load(None, Vec::new()).unwrap();
        let defaults = BrokerConfig::default();
        assert_eq!(config.bind_addr, "127.0.0.1:9093".parse().unwrap());
        assert_eq!(config.advertised_port, None);
        assert_eq!(config.broker.advertised_host, "127.0.0.1");
        assert_eq!(config.broker.node_id, defaults.node_id);
        assert_eq!(config.broker.cluster_id, defaults.cluster_id);
        assert_eq!(config.broker.instance_id, 0);
        assert!(config.broker.auto_create_topics);
        assert_eq!(config.broker.auto_create_partitions, 1);
        assert_eq!(
            config.broker.default_topic_config,
            defaults.default_topic_config
        );
        assert_eq!(
            format!("{:?}", config.broker.limits),
            format!("{:?}", defaults.limits)
        );
        assert_eq!(
            format!("{:?}", config.broker.timeouts),
            format!("{:?}", defaults.timeouts)
        );
        assert!(matches!(
            &config.backend,
            Backend::Memory(m) if *m == MemoryStoreConfig::default()
        ));
        assert!(config.warnings.is_empty());
        assert_eq!(config.config_file, None);
    }

    #[test]
    fn keys_follow_the_struct_and_are_all_documented() {
        let keys = keys();
        assert!(keys.len() >= 30, "{keys:?}");
        for expected in [
            "bind_addr",
            "advertised_host",
            "advertised_port",
            "max_connections",
            "max_frame_size",
            "idle_timeout_secs",
            "read_timeout_secs",
            "write_timeout_secs",
            "shutdown_drain_timeout_secs",
            "instance_id",
            "bridge_enabled",
            "auto_create_topics_enabled",
            "auto_create_topics_partitions",
            "iggy_addr",
            "iggy_username",
            "iggy_password",
            "iggy_stream",
            "topic_map_path",
            "iggy_sessions",
            "iggy_metadata_max_age_ms",
            "iggy_read_ahead_bytes",
            "iggy_send_batch_bytes",
        ] {
            assert!(keys.contains(&expected), "{expected} missing");
        }
        let docs = include_str!("../../../docs/configuration.md");
        for key in keys {
            let row = format!("| `{}` | `{key}` |", env_name(key));
            assert!(
                docs.contains(&row),
                "docs/configuration.md lacks the row {row}"
            );
        }
    }

    #[test]
    fn documented_defaults_are_the_real_ones() {
        let docs = include_str!("../../../docs/configuration.md");
        let defaults = Value::serialize(RawConfig::default()).unwrap();
        let defaults = defaults.as_dict().unwrap();
        let mut checked = 0;
        for key in keys() {
            let text = match defaults.get(*key) {
                Some(Value::String(_, s)) => s.clone(),
                Some(Value::Num(_, n)) => n
                    .to_u128()
                    .map(|n| n.to_string())
                    .or_else(|| n.to_i128().map(|n| n.to_string()))
                    .unwrap_or_else(|| panic!("{key}: {n:?}")),
                Some(Value::Bool(_, b)) => b.to_string(),
                // Unset options are described in words.
                _ => continue,
            };
            let row = format!("| `{}` | `{key}` | `{text}`", env_name(key));
            assert!(docs.contains(&row), "docs/configuration.md lacks {row}");
            checked += 1;
        }
        assert!(checked >= 25, "{checked}");
    }

    #[test]
    fn environment_selection() {
        let settings = env(&[
            ("IGGY_KAFKA_MAX_CONNECTIONS", "5"),
            ("IGGY_KAFKA_CONFIG", "/etc/gateway.toml"),
            ("IGGY_KAFKA_ADVERTISED_HOST", "  "),
            ("IGGY_KAFKAX_OTHER", "1"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(
            settings,
            vec![("max_connections".to_string(), "5".to_string())]
        );
    }

    #[test]
    fn environment_overrides_file_which_overrides_defaults() {
        let file = toml_file(
            r#"
            max_connections = 10
            idle_timeout_secs = 5
            advertised_host = "file.example"
            auto_create_topics_enabled = false
            "#,
        );
        let config = load(
            Some(file.path()),
            env(&[
                ("IGGY_KAFKA_MAX_CONNECTIONS", "20"),
                ("IGGY_KAFKA_ADVERTISED_PORT", "19092"),
            ]),
        )
        .unwrap();
        // Environment wins over the file.
        assert_eq!(config.broker.limits.max_connections, 20);
        // The file wins over the defaults.
        assert_eq!(config.broker.timeouts.idle, Duration::from_secs(5));
        assert_eq!(config.broker.advertised_host, "file.example");
        assert!(!config.broker.auto_create_topics);
        // Untouched keys keep their defaults.
        assert_eq!(
            config.broker.timeouts.read,
            BrokerConfig::default().timeouts.read
        );
        assert_eq!(config.advertised_port, Some(19092));
        assert_eq!(config.broker_config(40000).advertised_port, 19092);
        assert_eq!(config.config_file.as_deref(), Some(file.path()));
    }

    #[test]
    fn file_values_may_be_strings_and_env_values_stay_verbatim() {
        let file = toml_file("max_connections = \"100\"\ncluster_id = \"from-file\"\n");
        let config = load(
            Some(file.path()),
            env(&[
                // figment's own Env provider would read these as a number and an array.
                ("IGGY_KAFKA_CLUSTER_ID", "007"),
                ("IGGY_KAFKA_IGGY_PASSWORD", " [secret] "),
            ]),
        )
        .unwrap();
        assert_eq!(config.broker.limits.max_connections, 100);
        assert_eq!(config.broker.cluster_id, "007");
    }

    #[test]
    fn the_bound_port_is_advertised_unless_one_is_set() {
        let config = load(None, env(&[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")])).unwrap();
        assert_eq!(config.bind_addr.port(), 0);
        assert_eq!(config.broker_config(45678).advertised_port, 45678);
        assert_eq!(config.broker_config(45678).advertised_host, "127.0.0.1");
    }

    #[test]
    fn wildcard_bind_needs_an_advertised_host() {
        for wildcard in ["0.0.0.0:9093", "[::]:9093"] {
            let message = load_err(None, &[("IGGY_KAFKA_BIND_ADDR", wildcard)]);
            assert!(message.contains("IGGY_KAFKA_ADVERTISED_HOST"), "{message}");
            assert!(message.contains("IGGY_KAFKA_BIND_ADDR"), "{message}");
            let config = load(
                None,
                env(&[
                    ("IGGY_KAFKA_BIND_ADDR", wildcard),
                    ("IGGY_KAFKA_ADVERTISED_HOST", "gw.example"),
                ]),
            )
            .unwrap();
            assert_eq!(config.broker.advertised_host, "gw.example");
        }
        let message = load_err(None, &[("IGGY_KAFKA_ADVERTISED_HOST", "0.0.0.0")]);
        assert!(message.contains("IGGY_KAFKA_ADVERTISED_HOST"), "{message}");
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        for (var, value) in [
            ("IGGY_KAFKA_MAX_CONNECTIONS", "abc"),
            ("IGGY_KAFKA_MAX_CONNECTIONS", "0"),
            ("IGGY_KAFKA_MAX_CONNECTIONS", "-1"),
            ("IGGY_KAFKA_BIND_ADDR", "localhost"),
            ("IGGY_KAFKA_ADVERTISED_PORT", "0"),
            ("IGGY_KAFKA_ADVERTISED_PORT", "65536"),
            ("IGGY_KAFKA_INSTANCE_ID", "65536"),
            ("IGGY_KAFKA_NODE_ID", "-1"),
            ("IGGY_KAFKA_CLUSTER_ID", "has space"),
            ("IGGY_KAFKA_MAX_FRAME_SIZE", "100"),
            ("IGGY_KAFKA_MAX_FRAME_SIZE", "4294967296"),
            ("IGGY_KAFKA_MAX_IN_FLIGHT_PER_CONNECTION", "0"),
            ("IGGY_KAFKA_MAX_PARTITIONS_PER_TOPIC", "0"),
            ("IGGY_KAFKA_MAX_FETCH_WAIT_MS", "1e3"),
            ("IGGY_KAFKA_IDLE_TIMEOUT_SECS", "0"),
            ("IGGY_KAFKA_READ_TIMEOUT_SECS", "999999999"),
            ("IGGY_KAFKA_WRITE_TIMEOUT_SECS", "1.5"),
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "yes"),
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "0"),
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "1001"),
            ("IGGY_KAFKA_DEFAULT_RETENTION_MS", "0"),
            ("IGGY_KAFKA_DEFAULT_RETENTION_BYTES", "-2"),
            ("IGGY_KAFKA_DEFAULT_MAX_MESSAGE_BYTES", "0"),
            ("IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES", "0"),
            ("IGGY_KAFKA_MEMORY_MAX_TOPICS", "0"),
            ("IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS", "0"),
            ("IGGY_KAFKA_BRIDGE_ENABLED", "1"),
        ] {
            let message = load_err(None, &[(var, value)]);
            assert!(
                message.starts_with(&format!("{var}={value:?}: ")),
                "{var}={value}: {message}"
            );
        }
    }

    #[test]
    fn bad_file_values_name_the_key_and_the_file() {
        let file = toml_file("max_connections = 0\n");
        let message = load_err(Some(file.path()), &[]);
        assert_eq!(
            message,
            format!(
                "max_connections in {}: must be at least 1",
                file.path().display()
            )
        );

        let file = toml_file("max_connections = \"many\"\n");
        let message = load_err(Some(file.path()), &[]);
        assert!(message.starts_with("max_connections in "), "{message}");

        // The environment overrides a bad file value, and is then what gets checked.
        let file = toml_file("max_connections = 0\n");
        assert!(
            load(
                Some(file.path()),
                env(&[("IGGY_KAFKA_MAX_CONNECTIONS", "3")])
            )
            .is_ok()
        );
    }

    #[test]
    fn unknown_variables_are_warned_about_unknown_file_keys_refused() {
        let config = load(
            None,
            env(&[
                ("IGGY_KAFKA_SASL_ENABLED", "true"),
                ("IGGY_KAFKA_PORT", "tcp://10.0.0.1:9093"),
            ]),
        )
        .unwrap();
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        assert!(config.warnings[0].starts_with("IGGY_KAFKA_PORT is not a setting"));
        assert!(config.warnings[1].starts_with("IGGY_KAFKA_SASL_ENABLED is not a setting"));

        let file = toml_file("max_conections = 3\n");
        let message = load_err(Some(file.path()), &[]);
        assert!(
            message.contains("unknown key \"max_conections\""),
            "{message}"
        );

        let file = toml_file("MAX_CONNECTIONS = 3\n");
        let message = load_err(Some(file.path()), &[]);
        assert!(message.contains("keys are lower case"), "{message}");

        let file = toml_file("[server]\nbind_addr = \"127.0.0.1:1\"\n");
        let message = load_err(Some(file.path()), &[]);
        assert!(message.contains("unknown key \"server\""), "{message}");
    }

    #[test]
    fn unreadable_or_malformed_files_are_refused() {
        let message = load_err(Some(Path::new("/nonexistent/gateway.toml")), &[]);
        assert!(
            message.starts_with("cannot read config file /nonexistent/gateway.toml"),
            "{message}"
        );

        let file = toml_file("max_connections = \n");
        let message = load_err(Some(file.path()), &[]);
        assert!(message.contains("is not valid TOML"), "{message}");
        assert!(message.contains("line 1"), "{message}");
    }

    #[test]
    fn bridge_needs_a_password_and_takes_the_iggy_settings() {
        let message = load_err(
            None,
            &[
                ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
                ("IGGY_KAFKA_IGGY_ADDR", "127.0.0.1:8090"),
            ],
        );
        assert!(message.contains("IGGY_KAFKA_IGGY_PASSWORD"), "{message}");
        assert!(message.contains("no default password"), "{message}");

        let config = load(
            None,
            env(&[
                ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
                ("IGGY_KAFKA_IGGY_ADDR", "10.1.2.3:9090"),
                ("IGGY_KAFKA_IGGY_USERNAME", "gateway"),
                ("IGGY_KAFKA_IGGY_PASSWORD", "s3cret [x]"),
                ("IGGY_KAFKA_IGGY_STREAM", "events"),
                ("IGGY_KAFKA_IGGY_SESSIONS", "8"),
                ("IGGY_KAFKA_IGGY_METADATA_MAX_AGE_MS", "0"),
                ("IGGY_KAFKA_IGGY_READ_AHEAD_BYTES", "0"),
                ("IGGY_KAFKA_IGGY_SEND_BATCH_BYTES", "262144"),
            ]),
        )
        .expect("valid bridge settings");
        let Backend::Iggy(b) = &config.backend else {
            panic!("expected the Iggy backend, got {:?}", config.backend);
        };
        assert_eq!(b.address, "10.1.2.3:9090");
        assert_eq!(b.username, "gateway");
        assert_eq!(b.password, "s3cret [x]");
        assert_eq!(b.stream, "events");
        assert_eq!(b.sessions, 8);
        assert_eq!(b.metadata_max_age, Duration::ZERO);
        assert_eq!(b.read_ahead_bytes, 0);
        assert_eq!(b.send_batch_bytes, 262_144);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);

        let file = toml_file("bridge_enabled = true\n");
        let message = load_err(Some(file.path()), &[]);
        assert!(message.contains("IGGY_KAFKA_IGGY_PASSWORD"), "{message}");
    }

    #[test]
    fn bridge_settings_without_the_bridge_are_reported_as_ignored() {
        let file = toml_file("iggy_stream = \"kafka\"\n");
        let config = load(
            Some(file.path()),
            env(&[
                ("IGGY_KAFKA_IGGY_ADDR", "127.0.0.1:8090"),
                ("IGGY_KAFKA_TOPIC_MAP_PATH", "/etc/map.toml"),
            ]),
        )
        .unwrap();
        let suffix = " has no effect: the Iggy bridge is disabled";
        assert_eq!(
            config.warnings,
            vec![
                format!("IGGY_KAFKA_IGGY_ADDR{suffix}"),
                format!("iggy_stream in {}{suffix}", file.path().display()),
                format!("IGGY_KAFKA_TOPIC_MAP_PATH{suffix}"),
            ]
        );
    }

    #[test]
    fn drain_timeout_may_be_zero() {
        let config = load(
            None,
            env(&[("IGGY_KAFKA_SHUTDOWN_DRAIN_TIMEOUT_SECS", "0")]),
        )
        .unwrap();
        assert_eq!(config.broker.timeouts.shutdown_drain, Duration::ZERO);
    }

    #[test]
    fn every_setting_reaches_the_broker_and_store() {
        let config = load(
            None,
            env(&[
                ("IGGY_KAFKA_BIND_ADDR", "[::1]:0"),
                ("IGGY_KAFKA_NODE_ID", "7"),
                ("IGGY_KAFKA_CLUSTER_ID", "c1"),
                ("IGGY_KAFKA_INSTANCE_ID", "65535"),
                ("IGGY_KAFKA_MAX_CONNECTIONS", "11"),
                ("IGGY_KAFKA_MAX_FRAME_SIZE", "2048"),
                ("IGGY_KAFKA_MAX_IN_FLIGHT_PER_CONNECTION", "3"),
                ("IGGY_KAFKA_MAX_PARTITIONS_PER_TOPIC", "50"),
                ("IGGY_KAFKA_MAX_TOPICS_PER_REQUEST", "4"),
                ("IGGY_KAFKA_MAX_FETCH_RESPONSE_BYTES", "5000"),
                ("IGGY_KAFKA_MAX_FETCH_WAIT_MS", "250"),
                ("IGGY_KAFKA_MAX_DECOMPRESSED_BATCH_BYTES", "6000"),
                ("IGGY_KAFKA_MAX_RECORDS_PER_BATCH", "70"),
                ("IGGY_KAFKA_IDLE_TIMEOUT_SECS", "8"),
                ("IGGY_KAFKA_READ_TIMEOUT_SECS", "9"),
                ("IGGY_KAFKA_WRITE_TIMEOUT_SECS", "10"),
                ("IGGY_KAFKA_SHUTDOWN_DRAIN_TIMEOUT_SECS", "12"),
                ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "false"),
                ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "50"),
                ("IGGY_KAFKA_DEFAULT_RETENTION_MS", "-1"),
                ("IGGY_KAFKA_DEFAULT_RETENTION_BYTES", "1000000"),
                ("IGGY_KAFKA_DEFAULT_MAX_MESSAGE_BYTES", "4096"),
                ("IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES", "123456"),
                ("IGGY_KAFKA_MEMORY_MAX_TOPICS", "13"),
                ("IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS", "500"),
            ]),
        )
        .unwrap();
        let broker = config.broker_config(4321);
        assert_eq!(config.bind_addr, "[::1]:0".parse().unwrap());
        assert_eq!(broker.advertised_host, "::1");
        assert_eq!(broker.advertised_port, 4321);
        assert_eq!(broker.node_id, 7);
        assert_eq!(broker.cluster_id, "c1");
        assert_eq!(broker.instance_id, 65535);
        let l = &broker.limits;
        assert_eq!(
            (
                l.max_connections,
                l.max_frame_size,
                l.max_in_flight_per_connection,
                l.max_partitions_per_topic,
                l.max_topics_per_request,
                l.max_fetch_response_bytes,
                l.max_fetch_wait,
                l.max_decompressed_batch_bytes,
                l.max_records_per_batch,
            ),
            (
                11,
                2048,
                3,
                50,
                4,
                5000,
                Duration::from_millis(250),
                6000,
                70
            )
        );
        let t = &broker.timeouts;
        assert_eq!(
            (t.idle, t.read, t.write, t.shutdown_drain),
            (
                Duration::from_secs(8),
                Duration::from_secs(9),
                Duration::from_secs(10),
                Duration::from_secs(12)
            )
        );
        assert!(!broker.auto_create_topics);
        assert_eq!(broker.auto_create_partitions, 50);
        assert_eq!(
            broker.default_topic_config,
            TopicConfig {
                retention_ms: -1,
                retention_bytes: 1_000_000,
                max_message_bytes: 4096,
            }
        );
        let expected = MemoryStoreConfig {
            max_topics: 13,
            max_total_bytes: 123_456,
            retention_check_interval: Duration::from_millis(500),
        };
        assert!(matches!(&config.backend, Backend::Memory(m) if *m == expected));
    }

    #[test]
    fn one_line_keeps_position_and_reason() {
        assert_eq!(one_line("just this"), "just this");
        assert_eq!(
            one_line(
                "TOML parse error at line 1, column 5\n  |\n1 | a =\n  |    ^\ninvalid string\n"
            ),
            "TOML parse error at line 1, column 5: invalid string"
        );
    }
}
