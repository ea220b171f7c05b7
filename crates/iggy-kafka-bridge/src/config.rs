//! Bridge configuration and the topic map (Kafka topic -> Iggy stream and topic).
//!
//! Topic map file (TOML). `default_stream` is required; `[topics.*]` is optional. A Kafka
//! topic name with dots must be quoted, or TOML reads it as nested tables:
//!
//! ```toml
//! default_stream = "kafka"
//!
//! [topics.orders]
//! stream = "billing"
//! topic = "orders_v2"
//!
//! [topics."org.apache.events"]
//! stream = "billing"          # topic defaults to the Kafka name
//! ```
//!
//! When a file is given, its `default_stream` wins over [`BridgeConfig::stream`]: the file
//! is a complete mapping, not an overlay.

use crate::errors::BridgeError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How the bridge reaches Iggy and what it may use.
#[derive(Clone)]
pub struct BridgeConfig {
    /// Iggy TCP address `host:port`, or several separated by commas (at most
    /// [`MAX_IGGY_ADDRESSES`]): the nodes of one Iggy cluster. With several, the bridge
    /// connects to the first that answers (the SDK then moves the connection to the
    /// cluster's primary), and a connection whose node stops answering is moved to
    /// another node that does (`crate::connection`).
    pub address: String,
    /// Iggy user.
    pub username: String,
    /// Iggy password; required (Iggy generates a random root password unless started
    /// with development credentials, so no default can be right).
    pub password: String,
    /// Default Iggy stream of Kafka topics.
    pub stream: String,
    /// Optional topic map file.
    pub topic_map_path: Option<PathBuf>,
    /// Stream holding the bridge's own records (committed offsets, topic settings).
    pub meta_stream: String,
    /// Connection attempts at start (and per reconnect inside the SDK), at least 1.
    pub connect_retries: u32,
    /// Pause between connection attempts.
    pub retry_interval: Duration,
    /// Upper bound of every single Iggy call.
    pub call_timeout: Duration,
    /// Iggy connections (sessions) the bridge opens, at least 1. Appends to one
    /// partition always use the same session.
    pub sessions: usize,
    /// Sends in flight at once over all partitions.
    pub max_in_flight_sends: usize,
    /// Most messages per Iggy poll when reading. A Fetch asks Iggy for about as many
    /// messages as its byte limit holds (from the average size seen so far), never more
    /// than this.
    pub poll_batch_messages: u32,
    /// How long a topic's description (Iggy location, partition count, settings) is
    /// reused before Iggy is asked again. Zero asks Iggy on every request. Changes made
    /// through this gateway take effect at once; changes made by other Iggy clients are
    /// seen within this time.
    pub metadata_max_age: Duration,
    /// Sets `TCP_NODELAY` on the Iggy connections, so a request is not held back
    /// waiting for the acknowledgement of the previous one (Nagle's algorithm).
    pub tcp_nodelay: bool,
    /// Bytes of records the bridge may hold, over all partitions, polled from Iggy
    /// ahead of the consumers that will ask for them next (0: no read-ahead). A
    /// sequential reader then finds its next Fetch ready instead of waiting a round
    /// trip to Iggy.
    pub read_ahead_bytes: usize,
    /// Most payload bytes of one partition's waiting appends combined into one Iggy
    /// send (a single produced batch larger than this is still sent whole, alone).
    /// Iggy keeps each send as one batch and reads whole batches to answer a poll, so
    /// stored batches much larger than the polls that read them cost Iggy CPU on every
    /// read; larger sends mean fewer round trips when many small appends wait.
    pub send_batch_bytes: usize,
    /// How often the broker re-reads a partition for a waiting fetch.
    pub poll_interval: Duration,
    /// Most payload bytes one partition's send queue holds: appends waiting, in flight
    /// or awaiting confirmation (an append larger than this is still taken when the
    /// queue is empty). An append that does not fit waits for room, in arrival order,
    /// up to `send_queue_wait`; then it is refused with a retriable error
    /// (`LEADER_NOT_AVAILABLE`) and nothing of it is written.
    pub send_queue_bytes: usize,
    /// Most appends one partition's send queue holds (waiting, in flight or awaiting
    /// confirmation). Like `send_queue_bytes`: waited for, then refused.
    pub send_queue_appends: usize,
    /// Longest an append waits for room in its partition's send queue before it is
    /// refused (a caller's own deadline, such as a Produce request's timeout, may end
    /// the wait sooner). Zero refuses at once.
    pub send_queue_wait: Duration,
    /// Most payload bytes held for Iggy over all partitions together (waiting, in
    /// flight or awaiting confirmation), so many partitions cannot add up past it.
    /// Like `send_queue_bytes`: waited for (an append takes its partition's room
    /// first), then refused.
    pub send_buffer_bytes: usize,
    /// Byte limit a read sizes its Iggy polls for: a Fetch asking for more than this
    /// (per partition) is read as if it asked for this much. Together with
    /// `poll_batch_messages` it bounds what one poll brings in.
    pub poll_max_bytes: usize,
    /// Idempotent producers (counted per partition, summed over all partitions) whose
    /// last 5 landed batches the bridge remembers, so a retry of a batch that already
    /// landed is answered from it instead of being written again. At the bound a new
    /// producer replaces the least recently seen one of its partition.
    pub dedup_producers: usize,
    /// Records appended to a metadata log (`__kafka_gateway`) after its last snapshot
    /// before a new snapshot replaces it: start-up reads at most one snapshot (the live
    /// state) plus this many records.
    pub meta_snapshot_records: u64,
    /// How often the bridge reads what other gateways sharing the meta stream wrote to
    /// its shared logs (topic settings, SCRAM credentials, ACL bindings): the longest
    /// such a change made on another gateway takes to reach this one's view. Writes
    /// catch up first as well, whatever this is.
    pub meta_refresh_interval: Duration,
    /// Largest metadata record (one committed offset, topic setting, credential, ACL
    /// binding or consumer group state, as JSON) the bridge writes or reads; a longer
    /// one found in a log is skipped. Like Kafka's `max.message.bytes` of
    /// `__consumer_offsets` (1 MiB there).
    pub meta_record_max_bytes: usize,
    /// The cluster's meta secret: every record this bridge writes to the meta stream
    /// carries an HMAC under it, and records without a valid one are ignored (see
    /// [`crate::proof`]). Every gateway sharing the meta stream needs the same one, and
    /// nobody else may hold it. `None`: records are neither signed nor checked. At
    /// least [`crate::proof::MIN_SECRET_BYTES`] bytes.
    pub meta_secret: Option<String>,
    /// A secret being rotated out: records proven under it are still taken, none is
    /// signed with it.
    pub meta_previous_secret: Option<String>,
    /// Longest distance between the time a proof was signed and the time Iggy
    /// appended the record (clock skew between gateway and Iggy included); a proven
    /// record further apart is a replay and is ignored.
    pub meta_max_skew: Duration,
    /// Records Iggy appended before this time (Unix ms) are taken without a proof: to
    /// turn proofs on over a meta stream written without them.
    pub meta_unsigned_before_ms: Option<u64>,
    /// Speaks TLS to Iggy on every connection the bridge makes (its sessions, the
    /// metadata log, polls and the PLAIN checks). Iggy's TCP listener must have TLS on.
    pub tls_enabled: bool,
    /// The name the Iggy server's certificate must be valid for (a DNS name or an IP
    /// address). `None`: the host part of `address`.
    pub tls_domain: Option<String>,
    /// PEM file of the certificate authorities the Iggy server's certificate is checked
    /// against. `None`: the public web roots built into the SDK (a private CA needs
    /// this file).
    pub tls_ca_file: Option<PathBuf>,
    /// How long a successful SASL/PLAIN check against Iggy is remembered, so a client
    /// reconnecting with the same password does not cost an Iggy login each time. Zero
    /// remembers nothing. Only a keyed hash of the password is kept.
    pub plain_cache_ttl: Duration,
    /// Most users whose successful PLAIN check is remembered at once; the oldest entry
    /// goes first. Zero remembers nothing.
    pub plain_cache_entries: usize,
    /// How long a Kafka principal's Iggy permissions (and the names of the streams and
    /// topics they refer to) are used before they are read from Iggy again: the longest a
    /// permission changed in Iggy takes to reach the gateway's decisions.
    pub permissions_refresh: Duration,
    /// Most principals whose Iggy permissions are kept at once; the oldest entry goes
    /// first (it is read again when next needed).
    pub permissions_cache_entries: usize,
    /// The compaction cleaner (`log.cleaner.*`), see [`crate::compaction`].
    pub cleaner: crate::compaction::CleanerConfig,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeConfig")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("stream", &self.stream)
            .field("topic_map_path", &self.topic_map_path)
            .field("meta_stream", &self.meta_stream)
            .field("connect_retries", &self.connect_retries)
            .field("retry_interval", &self.retry_interval)
            .field("call_timeout", &self.call_timeout)
            .field("sessions", &self.sessions)
            .field("max_in_flight_sends", &self.max_in_flight_sends)
            .field("poll_batch_messages", &self.poll_batch_messages)
            .field("metadata_max_age", &self.metadata_max_age)
            .field("tcp_nodelay", &self.tcp_nodelay)
            .field("read_ahead_bytes", &self.read_ahead_bytes)
            .field("send_batch_bytes", &self.send_batch_bytes)
            .field("poll_interval", &self.poll_interval)
            .field("send_queue_bytes", &self.send_queue_bytes)
            .field("send_queue_appends", &self.send_queue_appends)
            .field("send_queue_wait", &self.send_queue_wait)
            .field("send_buffer_bytes", &self.send_buffer_bytes)
            .field("poll_max_bytes", &self.poll_max_bytes)
            .field("dedup_producers", &self.dedup_producers)
            .field("meta_snapshot_records", &self.meta_snapshot_records)
            .field("meta_refresh_interval", &self.meta_refresh_interval)
            .field("meta_record_max_bytes", &self.meta_record_max_bytes)
            .field(
                "meta_secret",
                &self.meta_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "meta_previous_secret",
                &self.meta_previous_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("meta_max_skew", &self.meta_max_skew)
            .field("meta_unsigned_before_ms", &self.meta_unsigned_before_ms)
            .field("tls_enabled", &self.tls_enabled)
            .field("tls_domain", &self.tls_domain)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("plain_cache_ttl", &self.plain_cache_ttl)
            .field("plain_cache_entries", &self.plain_cache_entries)
            .field("permissions_refresh", &self.permissions_refresh)
            .field("permissions_cache_entries", &self.permissions_cache_entries)
            .field("cleaner", &self.cleaner)
            .finish()
    }
}

impl Default for BridgeConfig {
    /// Defaults for everything but the password, which stays empty and fails
    /// [`BridgeConfig::validate`] until set.
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8090".into(),
            username: "iggy".into(),
            password: String::new(),
            stream: "kafka".into(),
            topic_map_path: None,
            meta_stream: "__kafka_gateway".into(),
            connect_retries: 3,
            retry_interval: Duration::from_secs(1),
            call_timeout: Duration::from_secs(15),
            sessions: 4,
            max_in_flight_sends: 256,
            poll_batch_messages: 10_000,
            metadata_max_age: Duration::from_secs(1),
            tcp_nodelay: true,
            read_ahead_bytes: 64 << 20,
            send_batch_bytes: 1 << 20,
            poll_interval: Duration::from_millis(100),
            send_queue_bytes: 16 << 20,
            send_queue_appends: 1024,
            send_queue_wait: Duration::from_secs(5),
            send_buffer_bytes: 256 << 20,
            poll_max_bytes: 16 << 20,
            dedup_producers: 100_000,
            meta_snapshot_records: 10_000,
            meta_refresh_interval: Duration::from_secs(1),
            meta_record_max_bytes: 1 << 20,
            meta_secret: None,
            meta_previous_secret: None,
            meta_max_skew: Duration::from_secs(300),
            meta_unsigned_before_ms: None,
            tls_enabled: false,
            tls_domain: None,
            tls_ca_file: None,
            plain_cache_ttl: Duration::from_secs(60),
            plain_cache_entries: 10_000,
            permissions_refresh: Duration::from_secs(10),
            permissions_cache_entries: 10_000,
            cleaner: crate::compaction::CleanerConfig::default(),
        }
    }
}

impl BridgeConfig {
    /// A configuration with defaults and the given credentials.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
            ..Self::default()
        }
    }

    /// Checks every field; `connect` calls this first.
    pub fn validate(&self) -> Result<(), BridgeError> {
        let bad = |m: &str| Err(BridgeError::Config(m.to_owned()));
        if self.address.trim().is_empty() {
            return bad("address is empty");
        }
        let addresses = self.addresses();
        if addresses.len() > MAX_IGGY_ADDRESSES {
            return bad("address must list at most 16 Iggy addresses");
        }
        for (i, address) in addresses.iter().enumerate() {
            if address.is_empty() {
                return bad("address must be host:port, or several separated by commas");
            }
            if addresses[..i].contains(address) {
                return Err(BridgeError::Config(format!(
                    "address lists {address} twice"
                )));
            }
        }
        if self.tls_enabled
            && self.tls_domain.is_none()
            && addresses.len() > 1
            && addresses.iter().any(|a| host_of(a).contains(':'))
        {
            // With several nodes the certificate name follows the node reached, taken
            // from the address text; an IPv6 literal does not survive that.
            return bad("tls_domain is required with TLS, several addresses and IPv6 literals");
        }
        if self.username.is_empty() {
            return bad("username is empty");
        }
        if self.password.is_empty() {
            return bad("password is required (no default)");
        }
        for (what, name) in [("stream", &self.stream), ("meta_stream", &self.meta_stream)] {
            if !valid_iggy_name(name) {
                return Err(BridgeError::Config(format!(
                    "{what} {name:?} is not a valid Iggy name (1..=255 bytes)"
                )));
            }
        }
        if self.stream == self.meta_stream {
            return bad("stream and meta_stream must differ");
        }
        if !(1..=100).contains(&self.connect_retries) {
            return bad("connect_retries must be within 1..=100");
        }
        if self.call_timeout.is_zero() || self.call_timeout > Duration::from_secs(600) {
            return bad("call_timeout must be within (0, 600s]");
        }
        if !(1..=64).contains(&self.sessions) {
            return bad("sessions must be within 1..=64");
        }
        if self.max_in_flight_sends == 0 {
            return bad("max_in_flight_sends must be at least 1");
        }
        if !(1..=100_000).contains(&self.poll_batch_messages) {
            return bad("poll_batch_messages must be within 1..=100000");
        }
        if !(1..=MAX_SEND_BATCH_BYTES).contains(&self.send_batch_bytes) {
            return bad("send_batch_bytes must be within 1..=67108864 (64 MiB)");
        }
        if self.metadata_max_age > Duration::from_secs(3600) {
            return bad("metadata_max_age must be at most 1 hour");
        }
        if self.poll_interval.is_zero() {
            return bad("poll_interval must be above zero");
        }
        if !(1..=MAX_QUEUE_BYTES).contains(&self.send_queue_bytes) {
            return bad("send_queue_bytes must be within 1..=4294967296 (4 GiB)");
        }
        if !(1..=1_000_000).contains(&self.send_queue_appends) {
            return bad("send_queue_appends must be within 1..=1000000");
        }
        if self.send_queue_wait > MAX_SEND_QUEUE_WAIT {
            return bad("send_queue_wait must be at most 10 minutes");
        }
        if self.send_buffer_bytes < self.send_queue_bytes
            || self.send_buffer_bytes > MAX_QUEUE_BYTES
        {
            return bad("send_buffer_bytes must be within send_queue_bytes..=4294967296 (4 GiB)");
        }
        if !(1..=MAX_QUEUE_BYTES).contains(&self.poll_max_bytes) {
            return bad("poll_max_bytes must be within 1..=4294967296 (4 GiB)");
        }
        if !(1..=1_000_000).contains(&self.dedup_producers) {
            return bad("dedup_producers must be within 1..=1000000");
        }
        if !(100..=100_000_000).contains(&self.meta_snapshot_records) {
            return bad("meta_snapshot_records must be within 100..=100000000");
        }
        if self.meta_refresh_interval < MIN_META_REFRESH
            || self.meta_refresh_interval > MAX_META_REFRESH
        {
            return bad("meta_refresh_interval must be within [10ms, 1 hour]");
        }
        if !(MIN_META_RECORD_BYTES..=MAX_META_RECORD_BYTES).contains(&self.meta_record_max_bytes) {
            return bad("meta_record_max_bytes must be within 4096..=67108864 (64 MiB)");
        }
        for (what, secret) in [
            ("meta_secret", &self.meta_secret),
            ("meta_previous_secret", &self.meta_previous_secret),
        ] {
            if secret
                .as_ref()
                .is_some_and(|s| s.len() < crate::proof::MIN_SECRET_BYTES)
            {
                return Err(BridgeError::Config(format!(
                    "{what} must be at least {} bytes",
                    crate::proof::MIN_SECRET_BYTES
                )));
            }
        }
        if self.meta_previous_secret.is_some() && self.meta_secret.is_none() {
            return bad("meta_previous_secret needs meta_secret");
        }
        if self.meta_max_skew < MIN_META_SKEW || self.meta_max_skew > MAX_META_SKEW {
            return bad("meta_max_skew must be within [1s, 1 day]");
        }
        self.cleaner.validate().map_err(BridgeError::Config)?;
        if !self.tls_enabled && (self.tls_domain.is_some() || self.tls_ca_file.is_some()) {
            // Settings for TLS without TLS would send the password in the clear while
            // the operator believes otherwise.
            return bad("tls_domain and tls_ca_file need tls_enabled");
        }
        if let Some(domain) = &self.tls_domain
            && (domain.trim().is_empty() || domain.len() > 253)
        {
            return bad("tls_domain must be a host name or IP address (1..=253 bytes)");
        }
        if self.tls_enabled && self.tls_host().is_empty() {
            return bad("tls_domain is not set and address has no host part");
        }
        if self.plain_cache_ttl > MAX_PLAIN_CACHE_TTL {
            return bad("plain_cache_ttl must be at most 1 hour");
        }
        if self.plain_cache_entries > MAX_PLAIN_CACHE_ENTRIES {
            return bad("plain_cache_entries must be within 0..=1000000");
        }
        if self.permissions_refresh.is_zero() || self.permissions_refresh > MAX_PERMISSIONS_REFRESH
        {
            return bad("permissions_refresh must be within (0, 1 hour]");
        }
        if !(1..=MAX_PERMISSIONS_CACHE_ENTRIES).contains(&self.permissions_cache_entries) {
            return bad("permissions_cache_entries must be within 1..=1000000");
        }
        Ok(())
    }

    /// The name the server's certificate is checked against: `tls_domain`, else the
    /// host part of the (first) address (`host:port`, `[v6]:port` or a bare host).
    pub fn tls_host(&self) -> String {
        if let Some(domain) = &self.tls_domain {
            return domain.trim().to_owned();
        }
        self.tls_host_for(&self.first_address())
    }

    /// The name the certificate of the node at `address` is checked against:
    /// `tls_domain`, else the host part of `address`.
    pub fn tls_host_for(&self, address: &str) -> String {
        if let Some(domain) = &self.tls_domain {
            return domain.trim().to_owned();
        }
        host_of(address).to_owned()
    }

    /// The Iggy addresses of `address`, in the order given, trimmed (an empty entry
    /// stays, for [`BridgeConfig::validate`] to refuse).
    pub fn addresses(&self) -> Vec<String> {
        self.address
            .split(',')
            .map(|a| a.trim().to_owned())
            .collect()
    }

    /// The first Iggy address: the only one of a single-node setting.
    pub fn first_address(&self) -> String {
        self.addresses().into_iter().next().unwrap_or_default()
    }
}

/// Longest [`BridgeConfig::send_queue_wait`] accepted.
const MAX_SEND_QUEUE_WAIT: Duration = Duration::from_secs(600);

/// Shortest [`BridgeConfig::meta_max_skew`] accepted.
pub const MIN_META_SKEW: Duration = Duration::from_secs(1);

/// Longest [`BridgeConfig::meta_max_skew`] accepted.
pub const MAX_META_SKEW: Duration = Duration::from_secs(86_400);

/// Shortest [`BridgeConfig::meta_refresh_interval`] accepted.
const MIN_META_REFRESH: Duration = Duration::from_millis(10);

/// Longest [`BridgeConfig::meta_refresh_interval`] accepted.
const MAX_META_REFRESH: Duration = Duration::from_secs(3600);

/// Smallest [`BridgeConfig::meta_record_max_bytes`] accepted: an offset commit with
/// Kafka's default 4 KiB of metadata must fit.
const MIN_META_RECORD_BYTES: usize = 4096;

/// Largest [`BridgeConfig::meta_record_max_bytes`] accepted.
const MAX_META_RECORD_BYTES: usize = 64 << 20;

/// Most Iggy addresses [`BridgeConfig::address`] may list.
pub const MAX_IGGY_ADDRESSES: usize = 16;

/// Upper bound of [`BridgeConfig::plain_cache_ttl`].
const MAX_PLAIN_CACHE_TTL: Duration = Duration::from_secs(3600);

/// Upper bound of [`BridgeConfig::plain_cache_entries`].
const MAX_PLAIN_CACHE_ENTRIES: usize = 1_000_000;

/// Longest `permissions_refresh` accepted.
const MAX_PERMISSIONS_REFRESH: Duration = Duration::from_secs(3600);

/// Most `permissions_cache_entries` accepted.
const MAX_PERMISSIONS_CACHE_ENTRIES: usize = 1_000_000;

/// The host part of an address: `host` of `host:port`, `v6` of `[v6]:port`, a bare
/// IPv6 address or host name as it is.
fn host_of(address: &str) -> &str {
    let address = address.trim();
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match address.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address.
        Some((host, _)) if !host.contains(':') => host,
        Some(_) | None => address,
    }
}

/// Upper bound of [`BridgeConfig::send_batch_bytes`].
const MAX_SEND_BATCH_BYTES: usize = 64 << 20;

/// Upper bound of the byte settings of the send queues and polls.
const MAX_QUEUE_BYTES: usize = 4 << 30;

fn valid_iggy_name(name: &str) -> bool {
    (1..=255).contains(&name.len()) && !name.trim().is_empty()
}

/// Where one Kafka topic lives in Iggy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IggyTopicRef {
    /// Iggy stream name.
    pub stream: String,
    /// Iggy topic name.
    pub topic: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicMapFile {
    default_stream: String,
    #[serde(default)]
    topics: BTreeMap<String, TopicOverride>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicOverride {
    stream: Option<String>,
    topic: Option<String>,
}

/// The Kafka topic -> Iggy stream/topic rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMap {
    default_stream: String,
    overrides: BTreeMap<String, IggyTopicRef>,
}

impl TopicMap {
    /// Only the default rule: every Kafka topic `t` is Iggy `stream`/`t`.
    pub fn with_default(stream: impl Into<String>) -> Self {
        Self {
            default_stream: stream.into(),
            overrides: BTreeMap::new(),
        }
    }

    /// Parses a topic map file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: TopicMapFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if !valid_iggy_name(&file.default_stream) {
            return Err("default_stream must be a non-empty Iggy name".into());
        }
        let mut overrides = BTreeMap::new();
        let mut targets = BTreeMap::new();
        for (kafka, o) in file.topics {
            let target = IggyTopicRef {
                stream: o.stream.unwrap_or_else(|| file.default_stream.clone()),
                topic: o.topic.unwrap_or_else(|| kafka.clone()),
            };
            if !valid_iggy_name(&target.stream) || !valid_iggy_name(&target.topic) {
                return Err(format!(
                    "topics.{kafka:?}: stream and topic must be non-empty"
                ));
            }
            // Two Kafka topics sharing one Iggy topic would interleave their records.
            if let Some(other) = targets.insert(target.clone(), kafka.clone()) {
                return Err(format!(
                    "topics {other:?} and {kafka:?} both map to {}/{}",
                    target.stream, target.topic
                ));
            }
            overrides.insert(kafka, target);
        }
        let map = Self {
            default_stream: file.default_stream,
            overrides,
        };
        // A default-rule topic can collide with an override target too.
        for (kafka, target) in &map.overrides {
            if target.stream == map.default_stream
                && target.topic != *kafka
                && !map.overrides.contains_key(&target.topic)
            {
                return Err(format!(
                    "topics.{kafka:?} maps to {}/{}, which is where Kafka topic {:?} \
                     lives by the default rule; give that topic an override too",
                    target.stream, target.topic, target.topic
                ));
            }
        }
        Ok(map)
    }

    /// Loads the map from the config: the file if one is given, else the default rule.
    pub fn load(config: &BridgeConfig) -> Result<Self, BridgeError> {
        let Some(path) = &config.topic_map_path else {
            return Ok(Self::with_default(config.stream.clone()));
        };
        let text = std::fs::read_to_string(path).map_err(|e| BridgeError::TopicMap {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let map = Self::parse(&text).map_err(|reason| BridgeError::TopicMap {
            path: path.display().to_string(),
            reason,
        })?;
        let streams: Vec<&String> = std::iter::once(&map.default_stream)
            .chain(map.overrides.values().map(|t| &t.stream))
            .collect();
        if streams.contains(&&config.meta_stream) {
            return Err(BridgeError::TopicMap {
                path: path.display().to_string(),
                reason: format!("stream {:?} is reserved for the bridge", config.meta_stream),
            });
        }
        Ok(map)
    }

    /// The default stream.
    pub fn default_stream(&self) -> &str {
        &self.default_stream
    }

    /// Where Kafka topic `kafka` lives.
    pub fn resolve(&self, kafka: &str) -> IggyTopicRef {
        self.overrides
            .get(kafka)
            .cloned()
            .unwrap_or_else(|| IggyTopicRef {
                stream: self.default_stream.clone(),
                topic: kafka.to_owned(),
            })
    }

    /// The Kafka name of an Iggy topic, if the map routes one to it.
    pub fn reverse(&self, target: &IggyTopicRef) -> Option<String> {
        if let Some((kafka, _)) = self.overrides.iter().find(|(_, t)| *t == target) {
            return Some(kafka.clone());
        }
        (target.stream == self.default_stream && !self.overrides.contains_key(&target.topic))
            .then(|| target.topic.clone())
    }

    /// Every stream the map routes to, sorted, without duplicates.
    pub fn streams(&self) -> Vec<String> {
        let mut streams: Vec<String> = std::iter::once(self.default_stream.clone())
            .chain(self.overrides.values().map(|t| t.stream.clone()))
            .collect();
        streams.sort();
        streams.dedup();
        streams
    }

    /// The Kafka topics the map's overrides route to Iggy stream `stream`, sorted (the
    /// default rule's topics are not listed: they are every other name).
    pub fn overrides_in(&self, stream: &str) -> Vec<String> {
        self.overrides
            .iter()
            .filter(|(_, t)| t.stream == stream)
            .map(|(kafka, _)| kafka.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_a_password() {
        let mut config = BridgeConfig::default();
        assert!(config.validate().is_err());
        config.password = "pw-hunter2".into();
        config.meta_secret = Some("meta-secret-value-0123456789abcdef".into());
        config.validate().unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("pw-hunter2") && !shown.contains("meta-secret-value"));
        config.connect_retries = 0;
        assert!(config.validate().is_err());
    }

    #[test]
    fn send_batch_bytes_is_bounded() {
        let mut config = BridgeConfig::new("iggy", "secret");
        for (bytes, ok) in [
            (0, false),
            (1, true),
            (64 << 20, true),
            ((64 << 20) + 1, false),
        ] {
            config.send_batch_bytes = bytes;
            assert_eq!(config.validate().is_ok(), ok, "{bytes}");
        }
    }

    #[test]
    fn queue_and_poll_bounds_are_checked() {
        let ok = BridgeConfig::new("iggy", "secret");
        ok.validate().unwrap();
        type Spoil = fn(&mut BridgeConfig);
        let cases: [(&str, Spoil); 16] = [
            ("meta_refresh_interval", |c| {
                c.meta_refresh_interval = Duration::from_millis(9)
            }),
            ("meta_refresh_interval", |c| {
                c.meta_refresh_interval = Duration::from_secs(3601)
            }),
            ("meta_record_max_bytes", |c| c.meta_record_max_bytes = 4095),
            ("meta_record_max_bytes", |c| {
                c.meta_record_max_bytes = (64 << 20) + 1
            }),
            ("send_queue_bytes", |c| c.send_queue_bytes = 0),
            ("send_queue_appends", |c| c.send_queue_appends = 0),
            ("send_queue_wait", |c| {
                c.send_queue_wait = Duration::from_secs(601)
            }),
            ("send_buffer_bytes", |c| {
                c.send_buffer_bytes = c.send_queue_bytes - 1
            }),
            ("poll_max_bytes", |c| c.poll_max_bytes = 0),
            ("dedup_producers", |c| c.dedup_producers = 0),
            ("meta_snapshot_records", |c| c.meta_snapshot_records = 99),
            ("meta_secret", |c| c.meta_secret = Some("short".into())),
            ("meta_previous_secret", |c| {
                c.meta_secret = Some("x".repeat(32));
                c.meta_previous_secret = Some("y".repeat(31));
            }),
            ("meta_previous_secret", |c| {
                c.meta_previous_secret = Some("y".repeat(32))
            }),
            ("meta_max_skew", |c| {
                c.meta_max_skew = Duration::from_millis(999)
            }),
            ("send_queue_bytes", |c| c.send_queue_bytes = (4 << 30) + 1),
        ];
        for (name, spoil) in cases {
            let mut c = ok.clone();
            spoil(&mut c);
            match c.validate() {
                Err(BridgeError::Config(m)) => assert!(m.starts_with(name), "{m}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn tls_and_plain_cache_settings_are_checked() {
        let ok = BridgeConfig::new("iggy", "secret");
        assert!(!ok.tls_enabled);
        assert_eq!(ok.plain_cache_ttl, Duration::from_secs(60));
        assert_eq!(ok.plain_cache_entries, 10_000);
        type Spoil = fn(&mut BridgeConfig);
        let cases: [(&str, Spoil); 6] = [
            ("tls_domain and tls_ca_file need", |c| {
                c.tls_ca_file = Some("ca.pem".into())
            }),
            ("tls_domain and tls_ca_file need", |c| {
                c.tls_domain = Some("iggy".into())
            }),
            ("tls_domain must", |c| {
                c.tls_enabled = true;
                c.tls_domain = Some(" ".into());
            }),
            ("tls_domain is not set", |c| {
                c.tls_enabled = true;
                c.address = ":8090".into();
            }),
            ("plain_cache_ttl", |c| {
                c.plain_cache_ttl = Duration::from_secs(3601)
            }),
            ("plain_cache_entries", |c| c.plain_cache_entries = 1_000_001),
        ];
        for (start, spoil) in cases {
            let mut c = ok.clone();
            spoil(&mut c);
            match c.validate() {
                Err(BridgeError::Config(m)) => assert!(m.starts_with(start), "{m}"),
                other => panic!("{start}: {other:?}"),
            }
        }
        let mut tls = ok.clone();
        tls.tls_enabled = true;
        tls.tls_ca_file = Some("ca.pem".into());
        tls.plain_cache_ttl = Duration::ZERO;
        tls.plain_cache_entries = 0;
        tls.validate().unwrap();
    }

    #[test]
    fn several_addresses_are_checked() {
        let mut c = BridgeConfig::new("iggy", "secret");
        c.address = " 127.0.0.1:8090 ,127.0.0.2:8090,127.0.0.3:8090".into();
        c.validate().unwrap();
        assert_eq!(
            c.addresses(),
            vec!["127.0.0.1:8090", "127.0.0.2:8090", "127.0.0.3:8090"]
        );
        assert_eq!(c.first_address(), "127.0.0.1:8090");
        assert_eq!(c.tls_host(), "127.0.0.1");
        let too_many: Vec<String> = (0..=MAX_IGGY_ADDRESSES)
            .map(|i| format!("10.0.0.{i}:8090"))
            .collect();
        for (address, start) in [
            ("a:1,,b:1", "address must be host:port"),
            ("a:1,", "address must be host:port"),
            ("a:1,b:1,a:1", "address lists a:1 twice"),
            (too_many.join(",").as_str(), "address must list at most 16"),
        ] {
            c.address = address.into();
            match c.validate() {
                Err(BridgeError::Config(m)) => assert!(m.starts_with(start), "{address}: {m}"),
                other => panic!("{address}: {other:?}"),
            }
        }
        c.address = "[::1]:8090,[::2]:8090".into();
        c.validate().unwrap();
        c.tls_enabled = true;
        assert!(
            c.validate().is_err(),
            "IPv6 literals with TLS need tls_domain"
        );
        c.tls_domain = Some("iggy.example".into());
        c.validate().unwrap();
    }

    #[test]
    fn the_tls_host_comes_from_the_address_unless_set() {
        let mut c = BridgeConfig::new("iggy", "secret");
        for (address, host) in [
            ("127.0.0.1:8090", "127.0.0.1"),
            ("iggy.example:8090", "iggy.example"),
            ("[::1]:8090", "::1"),
            ("::1", "::1"),
            ("iggy", "iggy"),
        ] {
            c.address = address.into();
            assert_eq!(c.tls_host(), host, "{address}");
        }
        c.tls_domain = Some("other.example".into());
        assert_eq!(c.tls_host(), "other.example");
    }

    #[test]
    fn parses_overrides_and_dotted_names() {
        let map = TopicMap::parse(
            r#"
            default_stream = "main"
            [topics.orders]
            stream = "billing"
            topic = "orders_v2"
            [topics."org.apache.events"]
            stream = "billing"
            "#,
        )
        .unwrap();
        assert_eq!(map.resolve("orders").stream, "billing");
        assert_eq!(map.resolve("orders").topic, "orders_v2");
        assert_eq!(map.resolve("org.apache.events").topic, "org.apache.events");
        assert_eq!(map.resolve("other").stream, "main");
        assert_eq!(map.resolve("other").topic, "other");
        let billing = IggyTopicRef {
            stream: "billing".into(),
            topic: "orders_v2".into(),
        };
        assert_eq!(map.reverse(&billing).as_deref(), Some("orders"));
        let shadowed = IggyTopicRef {
            stream: "main".into(),
            topic: "orders".into(),
        };
        assert_eq!(map.reverse(&shadowed), None);
        assert_eq!(map.streams(), vec!["billing", "main"]);
    }

    #[test]
    fn rejects_bad_files() {
        for text in [
            "",
            "[topics.a]\nstream = \"x\"",
            "default_stream = \"\"",
            "default_stream = \"k\"\nextra = 1",
            "default_stream = \"k\"\n[topics.a]\nstream = \"x\"\ntopic = \"t\"\n[topics.b]\nstream = \"x\"\ntopic = \"t\"",
            "default_stream = \"k\"\n[topics.a]\ntopic = \"b\"",
            "default_stream = \"k\"\n[topics.a]\nstreem = \"x\"",
        ] {
            assert!(TopicMap::parse(text).is_err(), "{text}");
        }
    }
}
