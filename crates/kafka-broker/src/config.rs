//! Plain configuration for the broker layer. Every limit is named here with its default;
//! the gateway application fills this from files and the environment.

use crate::store::TopicConfig;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// Everything the broker needs to know, with defaults suitable for local use.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Node id announced in Metadata and FindCoordinator.
    pub node_id: i32,
    /// Cluster id announced in Metadata and DescribeCluster.
    pub cluster_id: String,
    /// Host clients are told to connect to.
    pub advertised_host: String,
    /// Port clients are told to connect to.
    pub advertised_port: u16,
    /// This gateway instance's id: the high 16 bits of every producer id it allocates, so
    /// several gateways never hand out the same id.
    pub instance_id: u16,
    /// Create unknown topics when Metadata (v4+ with the flag set, or older versions) or
    /// Produce names them.
    pub auto_create_topics: bool,
    /// Partition count of auto-created topics.
    pub auto_create_partitions: i32,
    /// Settings of topics created without explicit configs.
    pub default_topic_config: TopicConfig,
    /// Resource bounds.
    pub limits: Limits,
    /// Connection timeouts.
    pub timeouts: Timeouts,
    /// Consumer-group coordinator settings (session timeout bounds, initial rebalance
    /// delay, group and member limits).
    pub groups: kafka_groups::GroupConfig,
    /// How coordinator shards are loaded and group states written (several gateways).
    pub group_state: GroupStateSettings,
    /// Client quotas: default rates and how usage is measured.
    pub quotas: crate::quotas::QuotaConfig,
    /// SASL authentication bounds, session lifetime and who may manage users.
    pub sasl: SaslSettings,
    /// Whether and how requests are authorized.
    pub authorization: AuthorizationSettings,
    /// The transaction coordinator and the partition side of transactions.
    pub transactions: TransactionSettings,
    /// How this gateway talks to the other gateways sharing the store (transaction
    /// markers and verifications).
    pub inter_gateway: InterGatewayConfig,
}

/// Transactions: the coordinator's bounds and timers, and the partition side's.
#[derive(Debug, Clone)]
pub struct TransactionSettings {
    /// The coordinator's bounds and timers (`transaction.max.timeout.ms`,
    /// `transactional.id.expiration.ms`, ...).
    pub coordinator: kafka_txn::TxnConfig,
    /// Most bytes read to rebuild one partition's transaction index from its log.
    pub txn_index_rebuild_max_bytes: usize,
    /// First wait before a marker write is retried; doubles up to `marker_retry_max`.
    pub marker_retry_min: Duration,
    /// Longest wait between marker retries.
    pub marker_retry_max: Duration,
    /// Partition transaction indexes held at once (the least recently used idle one is
    /// dropped past it and rebuilt from the log when needed).
    pub txn_index_max_partitions: usize,
    /// Verification guards held at once over all partitions (producers verified with
    /// the coordinator whose batch is not appended yet); the oldest hundredth goes past it.
    pub txn_max_verification_guards: usize,
    /// Topics remembered as already flagged transactional in the store; forgotten all at
    /// once past it (the flag is set again, idempotently).
    pub txn_max_flagged_topics: usize,
    /// How long an AddPartitionsToTxn, AddOffsetsToTxn or InitProducerId that finds its
    /// transactional id completing (its previous transaction's markers or a state write
    /// in flight) waits for it before it is answered CONCURRENT_TRANSACTIONS; zero
    /// answers at once, as Kafka's coordinator does.
    pub completion_wait: Duration,
}

impl TransactionSettings {
    /// Checks the bounds (the field named as `transactions.<path>`).
    pub fn check(&self) -> Result<(), InvalidSetting> {
        let bad = |field: &'static str, reason: &str| {
            Err(InvalidSetting {
                field,
                reason: reason.to_string(),
            })
        };
        let c = &self.coordinator;
        if c.max_timeout_ms < 1 {
            return bad(
                "transactions.coordinator.max_timeout_ms",
                "must be at least 1",
            );
        }
        if !(1..=i64::from(i32::MAX)).contains(&c.id_expiration_ms) {
            return bad(
                "transactions.coordinator.id_expiration_ms",
                "must be between 1 and 2147483647",
            );
        }
        if !(1..=i64::from(i32::MAX)).contains(&c.abort_check_interval_ms) {
            return bad(
                "transactions.coordinator.abort_check_interval_ms",
                "must be between 1 and 2147483647",
            );
        }
        for (field, value) in [
            (
                "transactions.coordinator.max_partitions_per_txn",
                c.max_partitions_per_txn,
            ),
            (
                "transactions.coordinator.max_transactional_ids",
                c.max_transactional_ids,
            ),
            ("transactions.coordinator.max_open_txns", c.max_open_txns),
            (
                "transactions.txn_index_rebuild_max_bytes",
                self.txn_index_rebuild_max_bytes,
            ),
            (
                "transactions.txn_index_max_partitions",
                self.txn_index_max_partitions,
            ),
            (
                "transactions.txn_max_verification_guards",
                self.txn_max_verification_guards,
            ),
            (
                "transactions.txn_max_flagged_topics",
                self.txn_max_flagged_topics,
            ),
        ] {
            if value == 0 {
                return bad(field, "must be at least 1");
            }
        }
        if self.marker_retry_min < Duration::from_millis(1)
            || self.marker_retry_min > self.marker_retry_max
        {
            return bad(
                "transactions.marker_retry_min",
                "must be at least 1 ms and at most marker_retry_max",
            );
        }
        if self.completion_wait > Duration::from_secs(60) {
            return bad("transactions.completion_wait", "must be at most 60 seconds");
        }
        if self.marker_retry_max > Duration::from_secs(600) {
            return bad(
                "transactions.marker_retry_max",
                "must be at most 10 minutes",
            );
        }
        Ok(())
    }
}

impl Default for TransactionSettings {
    fn default() -> Self {
        TransactionSettings {
            coordinator: kafka_txn::TxnConfig::default(),
            txn_index_rebuild_max_bytes: 1 << 30,
            marker_retry_min: Duration::from_millis(100),
            marker_retry_max: Duration::from_secs(5),
            txn_index_max_partitions: 100_000,
            txn_max_verification_guards: 100_000,
            txn_max_flagged_topics: 100_000,
            completion_wait: Duration::from_millis(500),
        }
    }
}

/// How this gateway connects to the others (Kafka's inter-broker listener and
/// credentials). Its `Debug` leaves the password out.
#[derive(Clone)]
pub struct InterGatewayConfig {
    /// The listener of the other gateways to connect to (by name; the first one
    /// advertised when none has this name).
    pub listener: String,
    /// SASL mechanism when that listener authenticates (`PLAIN`, `SCRAM-SHA-256`,
    /// `SCRAM-SHA-512`), else `None`.
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    pub username: Option<String>,
    /// SASL password.
    pub password: Option<String>,
    /// Longest wait for one answer from another gateway (connecting and authenticating
    /// included when the call has to).
    pub request_timeout: Duration,
    /// A PEM file of the CA certificates that sign the other gateways' certificates:
    /// when set, connections to them use TLS (the listener must be SSL or SASL_SSL).
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// The name the other gateways' certificates must carry; `None` checks the host each
    /// one advertises.
    pub tls_server_name: Option<String>,
    /// Calls to one gateway that may wait for its connection at once (one request is on
    /// the wire at a time per gateway); a call past it fails at once as a transport
    /// error, which callers retry.
    pub max_pending_calls: usize,
    /// Lets the client send a PLAIN password without TLS (`tls_ca_file` unset), where
    /// anyone on the path reads it. Off: such a login is refused.
    pub allow_plain_without_tls: bool,
    /// Most SCRAM iterations a peer may ask this client to compute (each one is work on
    /// this gateway); the bound the gateway itself puts on stored credentials.
    pub max_scram_iterations: u32,
}

impl std::fmt::Debug for InterGatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterGatewayConfig")
            .field("listener", &self.listener)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_server_name", &self.tls_server_name)
            .field("max_pending_calls", &self.max_pending_calls)
            .field("allow_plain_without_tls", &self.allow_plain_without_tls)
            .field("max_scram_iterations", &self.max_scram_iterations)
            .finish()
    }
}

impl Default for InterGatewayConfig {
    fn default() -> Self {
        InterGatewayConfig {
            listener: "PLAINTEXT".into(),
            sasl_mechanism: None,
            username: None,
            password: None,
            request_timeout: Duration::from_secs(10),
            tls_ca_file: None,
            tls_server_name: None,
            max_pending_calls: 256,
            allow_plain_without_tls: false,
            max_scram_iterations: kafka_sasl::ScramBounds::default().max_iterations,
        }
    }
}

/// Loading coordinator shards and writing group states (see the `groups` module of this
/// crate, and `docs/deployment.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStateSettings {
    /// How long a group request for a shard being loaded waits for the load before it is
    /// answered `COORDINATOR_LOAD_IN_PROGRESS` (Kafka answers at once; a short wait hides
    /// quick loads from clients). Default 1 s, at most 30 s.
    pub load_wait: Duration,
    /// First wait before a failed shard load (acquire, or reading its group states) or a
    /// failed group-state write is retried; it doubles per failure up to
    /// `load_retry_max`. Default 100 ms.
    pub load_retry_min: Duration,
    /// Longest wait between retries. Default 5 s.
    pub load_retry_max: Duration,
    /// How often the membership is re-checked besides its change notifications (a lease
    /// lost does not change the view). Default 1 s.
    pub recheck_interval: Duration,
}

impl Default for GroupStateSettings {
    fn default() -> Self {
        GroupStateSettings {
            load_wait: Duration::from_secs(1),
            load_retry_min: Duration::from_millis(100),
            load_retry_max: Duration::from_secs(5),
            recheck_interval: Duration::from_secs(1),
        }
    }
}

/// How requests are authorized (super users are [`SaslSettings::super_users`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationSettings {
    /// Whether every request is checked: `None` checks them when some listener
    /// authenticates its clients (SASL, or TLS where certificates name principals),
    /// `Some` forces it on or off.
    pub enabled: Option<bool>,
    /// Kafka's `allow.everyone.if.no.acl.found`: whether a resource no ACL binding
    /// covers is open to every principal (the other sources, such as Iggy permissions,
    /// still apply).
    pub allow_everyone_if_no_acl_found: bool,
    /// How often the ACL bindings are read again from their store, for changes made
    /// elsewhere (another gateway); changes made through this gateway apply at once.
    pub acl_refresh_interval: Duration,
    /// Longest resource name, principal or host a binding made with CreateAcls may have,
    /// in bytes (Kafka has no such bound): keeps the store's memory a small multiple of
    /// its bound on bindings.
    pub max_acl_field_bytes: usize,
    /// Most bindings (stored and derived together) one DescribeAcls answer lists; past
    /// it the answer is `POLICY_VIOLATION` asking for a narrower filter (Kafka has no
    /// such bound).
    pub max_described_acl_bindings: usize,
}

impl Default for AuthorizationSettings {
    fn default() -> Self {
        AuthorizationSettings {
            enabled: None,
            allow_everyone_if_no_acl_found: false,
            acl_refresh_interval: Duration::from_secs(10),
            max_acl_field_bytes: 4096,
            max_described_acl_bindings: 200_000,
        }
    }
}

/// How SASL listeners authenticate connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// Longest an authenticated session lasts before it must re-authenticate (KIP-368);
    /// `None` for no limit (a token's expiry still bounds its session).
    pub session_lifetime: Option<Duration>,
    /// Authentications in progress at once, gateway-wide; more wait their turn.
    pub max_concurrent_authentications: usize,
    /// Longest from accept until a SASL connection has authenticated.
    pub authentication_timeout: Duration,
    /// Largest frame accepted before a connection has authenticated (Kafka's
    /// `sasl.server.max.receive.size`).
    pub max_receive_size: usize,
    /// Delay of the first rejected authentication of a peer; it doubles with each
    /// further rejection.
    pub failure_delay: Duration,
    /// Longest delay after a rejection.
    pub failure_delay_max: Duration,
    /// Peers whose rejections are remembered at once.
    pub max_failure_peers: usize,
    /// Principals (`User:admin`) allowed to manage users: Describe/AlterUserScramCredentials.
    pub super_users: Vec<String>,
}

impl Default for SaslSettings {
    fn default() -> Self {
        SaslSettings {
            session_lifetime: None,
            max_concurrent_authentications: 32,
            authentication_timeout: Duration::from_secs(10),
            max_receive_size: 512 * 1024,
            failure_delay: Duration::from_millis(500),
            failure_delay_max: Duration::from_secs(30),
            max_failure_peers: 10_000,
            super_users: Vec::new(),
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            cluster_id: "iggy-gateway-kafka".into(),
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9093,
            instance_id: 0,
            auto_create_topics: true,
            auto_create_partitions: 1,
            default_topic_config: TopicConfig::default(),
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            groups: kafka_groups::GroupConfig {
                // Member ids must not repeat across restarts of the gateway.
                member_id_seed: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
                ..kafka_groups::GroupConfig::default()
            },
            group_state: GroupStateSettings::default(),
            quotas: crate::quotas::QuotaConfig::default(),
            sasl: SaslSettings::default(),
            authorization: AuthorizationSettings::default(),
            transactions: TransactionSettings::default(),
            inter_gateway: InterGatewayConfig::default(),
        }
    }
}

/// Named resource bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    pub max_frame_size: usize,
    /// Request bytes buffered at once over all connections (Kafka's
    /// `queued.max.request.bytes`); a connection waits for room before reading a body.
    pub max_buffered_request_bytes: usize,
    /// Requests of one connection being processed at once (pipelining depth).
    pub max_in_flight_per_connection: usize,
    /// Partitions one topic may have.
    pub max_partitions_per_topic: i32,
    /// Topics one CreateTopics request may create, and one Metadata request may
    /// auto-create.
    pub max_topics_per_request: usize,
    /// Upper bound on a Fetch response, whatever the client asks for.
    pub max_fetch_response_bytes: usize,
    /// Upper bound on how long a Fetch may wait for data.
    pub max_fetch_wait: Duration,
    /// Largest decompressed size of one produced batch.
    pub max_decompressed_batch_bytes: usize,
    /// Most records in one produced batch.
    pub max_records_per_batch: usize,
    /// Most list entries (topics, partitions, groups, members, names, configs, summed over
    /// every level) in one request of the metadata, fetch, group, offset, topic and config
    /// APIs. Kafka has no such bound. Over it, APIs with a top-level error code answer
    /// `INVALID_REQUEST`; the others have their connection closed.
    pub max_entries_per_request: usize,
    /// Most list entries (array elements at every level, primitive ones included, and
    /// unknown tagged fields) the decoder accepts in one request before the request is
    /// even looked at; past it the connection is closed. Above `max_entries_per_request`
    /// so that requests between the two get their API's answer for an oversized request.
    /// With the frame size it bounds the memory a decoded request can take.
    pub max_decode_entries: usize,
    /// Groups with committed offsets held at once. An OffsetCommit that would add one more
    /// gets `COORDINATOR_NOT_AVAILABLE` for every partition. Kafka has no such bound.
    pub max_groups_with_offsets: usize,
    /// How long the committed offsets of a group without members are kept after its last
    /// commit or the last time it had members (Kafka's `offsets.retention.minutes`).
    pub offsets_retention: Duration,
    /// Open connections from one IP address at once (Kafka's `max.connections.per.ip`);
    /// further ones are closed right after accept.
    pub max_connections_per_ip: usize,
    /// Per-address exceptions to `max_connections_per_ip` (Kafka's
    /// `max.connections.per.ip.overrides`); 0 refuses every connection from the address.
    pub max_connections_per_ip_overrides: BTreeMap<IpAddr, usize>,
    /// New connections accepted per second (Kafka's `max.connection.creation.rate`); past
    /// it, accepting waits, as Kafka delays accept. Up to one second's worth may arrive at once.
    pub max_connection_creation_rate: u32,
    /// Request bytes one IP address may hold of the budget for frames larger than
    /// `small_request_bytes`; never below one frame of `max_frame_size`.
    pub max_buffered_request_bytes_per_ip: usize,
    /// Request bytes one connection may hold of the budget for frames larger than
    /// `small_request_bytes`; never below one frame of `max_frame_size`.
    pub max_buffered_request_bytes_per_connection: usize,
    /// Frames up to this size (size prefix included) are small requests (ApiVersions,
    /// Metadata, heartbeats, offset commits): they are served from
    /// `small_request_reserve_bytes`, which larger frames cannot touch.
    pub small_request_bytes: usize,
    /// The part of `max_buffered_request_bytes` set aside for small requests, so they are
    /// answered while large uploads wait for memory.
    pub small_request_reserve_bytes: usize,
    /// Encoded response bytes one connection may have waiting for its writer before the
    /// broker starts no further request of it (as Kafka mutes the channel). One response
    /// larger than this still goes out whole.
    pub max_queued_response_bytes_per_connection: usize,
    /// Encoded response bytes waiting for writers over all connections; past it, a
    /// connection with any response still queued starts no further request.
    pub max_queued_response_bytes: usize,
    /// Longest a Produce waits for the store to confirm its appends, whatever the
    /// request's `timeout_ms` asks for (Kafka has no bound; the producer's own
    /// `request.timeout.ms` defaults to 30 s).
    pub max_produce_timeout: Duration,
    /// Largest age of a produced record's timestamp, in milliseconds before the broker's
    /// clock (Kafka's `log.message.timestamp.before.max.ms`, default `i64::MAX`: no
    /// bound). Applies to CreateTime batches; older ones get `INVALID_TIMESTAMP`.
    pub message_timestamp_before_max_ms: i64,
    /// Largest lead of a produced record's timestamp, in milliseconds ahead of the
    /// broker's clock (Kafka's `log.message.timestamp.after.max.ms`, default one hour
    /// since Kafka 4.0). Applies to CreateTime batches; later ones get `INVALID_TIMESTAMP`.
    pub message_timestamp_after_max_ms: i64,
    /// How long the state of an idempotent producer is kept without a write (Kafka's
    /// `producer.id.expiration.ms`, default one day).
    pub producer_id_expiration: Duration,
    /// Most producer entries kept: per-partition producer states and handed-out ids each
    /// (the least recently used hundredth is dropped when full).
    pub max_producer_states: usize,
    /// Most bytes of a partition's log read back to rebuild its idempotent producers'
    /// state when this gateway starts leading the partition (or starts), before its
    /// first idempotent batch is checked (Kafka has no such setting: it keeps producer
    /// snapshots next to its log). A producer whose last batches lie further back than
    /// this is treated as unknown, so a retry of such an old batch is accepted as new;
    /// a larger window costs more reading on every leadership move. 0 turns recovery
    /// off (every producer is unknown after a move or a restart).
    pub producer_state_recovery_bytes: usize,
    /// Producer state recoveries running at once over the whole gateway (each holds up
    /// to `producer_state_recovery_bytes` of read batches while it runs); the others
    /// wait, within their request's timeout. Kafka has no such setting.
    pub max_concurrent_producer_recoveries: usize,
    /// How long a partition's producer state recovery keeps reading the log again while
    /// what it reads shows a producer behind a batch this gateway saw confirmed (a store
    /// whose reads lag what it acknowledged, as a new Iggy primary can for a moment);
    /// after that the log is taken as it is. Zero takes the first read as it is.
    pub producer_state_recovery_lag_wait: Duration,
    /// Threads that decompress and check produced batches and scan partitions by
    /// timestamp, off the connections' workers.
    pub validation_threads: usize,
    /// A Produce whose uncompressed record bytes stay under this is checked on the
    /// connection's worker (the hop to a thread costs more); compressed records and
    /// larger requests always go to the validation threads.
    pub inline_validation_bytes: usize,
    /// Most bytes of read buffers kept idle for large request frames (64 KiB and up) to
    /// be read into, instead of a new allocation each (whose pages the kernel may have to
    /// fault in again). Resident, outside `max_buffered_request_bytes`; 0 keeps none.
    pub frame_pool_bytes: usize,
    /// Kept read buffers left idle this long are freed (checked every half of it), so
    /// the memory kept after a burst of large requests goes back once the burst is
    /// over; zero keeps them until they are lent again.
    pub frame_pool_idle: Duration,
    /// Most bytes the batches of one Produce may decompress to, together; partitions past
    /// it get `MESSAGE_TOO_LARGE` without being decompressed.
    pub max_decompressed_request_bytes: usize,
    /// Most partition entries of one ListOffsets request that are looked up; the rest
    /// are answered `INVALID_REQUEST`.
    pub max_list_offsets_partitions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_frame_size: 100 * 1024 * 1024,
            max_buffered_request_bytes: 512 * 1024 * 1024,
            max_in_flight_per_connection: 16,
            max_partitions_per_topic: 1000,
            max_topics_per_request: 1000,
            max_fetch_response_bytes: 64 * 1024 * 1024,
            max_fetch_wait: Duration::from_secs(30),
            max_decompressed_batch_bytes: 64 * 1024 * 1024,
            max_records_per_batch: 1_000_000,
            max_entries_per_request: 100_000,
            max_decode_entries: 1_000_000,
            max_groups_with_offsets: 100_000,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            max_connections_per_ip: 1000,
            max_connections_per_ip_overrides: BTreeMap::new(),
            max_connection_creation_rate: 1000,
            max_buffered_request_bytes_per_ip: 256 * 1024 * 1024,
            max_buffered_request_bytes_per_connection: 128 * 1024 * 1024,
            small_request_bytes: 64 * 1024,
            small_request_reserve_bytes: 32 * 1024 * 1024,
            max_queued_response_bytes_per_connection: 1024 * 1024,
            max_queued_response_bytes: 256 * 1024 * 1024,
            max_produce_timeout: Duration::from_secs(30),
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            producer_id_expiration: Duration::from_secs(86_400),
            max_producer_states: 100_000,
            producer_state_recovery_bytes: 4 * 1024 * 1024,
            max_concurrent_producer_recoveries: 8,
            producer_state_recovery_lag_wait: Duration::from_secs(10),
            validation_threads: 2,
            inline_validation_bytes: 64 * 1024,
            frame_pool_bytes: 32 * 1024 * 1024,
            frame_pool_idle: Duration::from_secs(30),
            max_decompressed_request_bytes: 128 * 1024 * 1024,
            max_list_offsets_partitions: 20_000,
        }
    }
}

/// Connection timeouts.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Longest silence between two requests before the connection is closed.
    pub idle: Duration,
    /// Longest time to receive the rest of a frame once its first byte arrived.
    pub read: Duration,
    /// Longest time to write one response.
    pub write: Duration,
    /// On shutdown, how long in-flight requests may take before connections are closed.
    pub shutdown_drain: Duration,
    /// When the gateway answers a request and then closes the connection (a refused
    /// authentication, for one), how long it keeps the socket open after the answer is
    /// written, so the client reads the answer before it sees the connection end (some
    /// clients drop data that arrives together with the close). Zero closes at once.
    pub close_linger: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: Duration::from_secs(600),
            read: Duration::from_secs(30),
            write: Duration::from_secs(30),
            shutdown_drain: Duration::from_secs(10),
            close_linger: Duration::from_millis(200),
        }
    }
}

/// Longest duration accepted for a broker timeout or wait (7 days). Far beyond any sensible
/// value, and it keeps `Instant + duration` arithmetic far away from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest close linger accepted: a connection that is being closed holds its socket
/// at most this long.
pub const MAX_CLOSE_LINGER: Duration = Duration::from_secs(10);

/// Longest offsets retention accepted (ten years); retention is compared on wall-clock
/// milliseconds, so only overflow needs keeping away.
pub const MAX_OFFSETS_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// Longest cluster id accepted; Kafka's own are 22 characters.
pub const MAX_CLUSTER_ID_LEN: usize = 255;

/// A broker setting the broker refuses to run with: the field and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
#[non_exhaustive]
pub struct InvalidSetting {
    /// The field, as its path in [`BrokerConfig`] (`node_id`, `limits.max_frame_size`,
    /// `default_topic_config.retention_ms`), so a caller can name it its own way.
    pub field: &'static str,
    /// The rule the value breaks, e.g. `must be at least 1`.
    pub reason: String,
}

impl BrokerConfig {
    /// Checks the values that would make the broker misbehave.
    pub fn validate(&self) -> Result<(), crate::BrokerError> {
        self.check()
            .map_err(|e| crate::BrokerError::Config(e.to_string()))
    }

    /// Every rule the broker's settings must follow; the first one broken is returned with
    /// the field it is about. [`BrokerConfig::validate`] is this with the broker's error.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        let bad = |field: &'static str, reason: &str| {
            Err(InvalidSetting {
                field,
                reason: reason.to_string(),
            })
        };
        let host = self.advertised_host.as_str();
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("advertised_host", "must be a host name or IP address");
        }
        if host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
        {
            return bad(
                "advertised_host",
                "clients cannot connect to an unspecified address; give a reachable host",
            );
        }
        if self.advertised_port == 0 {
            return bad("advertised_port", "must be between 1 and 65535");
        }
        if self.node_id < 0 {
            return bad("node_id", "must be 0 or more");
        }
        let cluster_id = self.cluster_id.as_str();
        if cluster_id.is_empty()
            || cluster_id.len() > MAX_CLUSTER_ID_LEN
            || cluster_id
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(
                "cluster_id",
                "must be 1 to 255 characters without spaces or control characters",
            );
        }

        let groups = &self.groups;
        if groups.min_session_timeout > groups.max_session_timeout {
            return bad(
                "groups.min_session_timeout",
                "must not exceed the maximum session timeout",
            );
        }
        if groups.max_session_timeout.is_zero() {
            return bad("groups.max_session_timeout", "must be above zero");
        }
        if groups.max_rebalance_timeout.is_zero() || groups.max_rebalance_timeout > MAX_DURATION {
            return bad(
                "groups.max_rebalance_timeout",
                "must be above zero and at most 7 days",
            );
        }
        if groups.initial_rebalance_delay > groups.max_rebalance_timeout {
            return bad(
                "groups.initial_rebalance_delay",
                "must not exceed the maximum rebalance timeout",
            );
        }
        if groups.max_id_bytes == 0 || groups.max_id_bytes > i16::MAX as usize {
            return bad("groups.max_id_bytes", "must be between 1 and 32767");
        }
        if groups.max_state_bytes == 0 {
            return bad("groups.max_state_bytes", "must be at least 1");
        }
        if groups.max_pending_members == 0 {
            return bad("groups.max_pending_members", "must be at least 1");
        }
        if groups.max_groups == 0 {
            return bad("groups.max_groups", "must be at least 1");
        }
        if groups.max_members_per_group == 0 {
            return bad("groups.max_members_per_group", "must be at least 1");
        }

        let limits = &self.limits;
        let i32_max = i32::MAX as usize;
        for (field, value) in [
            ("limits.max_connections", limits.max_connections),
            (
                "limits.max_in_flight_per_connection",
                limits.max_in_flight_per_connection,
            ),
            (
                "limits.max_topics_per_request",
                limits.max_topics_per_request,
            ),
            (
                "limits.max_fetch_response_bytes",
                limits.max_fetch_response_bytes,
            ),
            ("limits.max_records_per_batch", limits.max_records_per_batch),
            (
                "limits.max_entries_per_request",
                limits.max_entries_per_request,
            ),
            ("limits.max_decode_entries", limits.max_decode_entries),
            (
                "limits.max_groups_with_offsets",
                limits.max_groups_with_offsets,
            ),
            (
                "limits.max_connections_per_ip",
                limits.max_connections_per_ip,
            ),
            (
                "limits.max_connection_creation_rate",
                limits.max_connection_creation_rate as usize,
            ),
            (
                "limits.max_buffered_request_bytes_per_ip",
                limits.max_buffered_request_bytes_per_ip,
            ),
            (
                "limits.max_buffered_request_bytes_per_connection",
                limits.max_buffered_request_bytes_per_connection,
            ),
            (
                "limits.max_queued_response_bytes_per_connection",
                limits.max_queued_response_bytes_per_connection,
            ),
            (
                "limits.max_queued_response_bytes",
                limits.max_queued_response_bytes,
            ),
            ("limits.max_producer_states", limits.max_producer_states),
            (
                "limits.max_concurrent_producer_recoveries",
                limits.max_concurrent_producer_recoveries,
            ),
            ("limits.validation_threads", limits.validation_threads),
            (
                "limits.max_decompressed_request_bytes",
                limits.max_decompressed_request_bytes,
            ),
            (
                "limits.max_list_offsets_partitions",
                limits.max_list_offsets_partitions,
            ),
        ] {
            if value == 0 {
                return bad(field, "must be at least 1");
            }
        }
        if self.authorization.max_acl_field_bytes == 0 {
            return bad("authorization.max_acl_field_bytes", "must be at least 1");
        }
        if self.authorization.max_described_acl_bindings == 0 {
            return bad(
                "authorization.max_described_acl_bindings",
                "must be at least 1",
            );
        }
        if self.authorization.acl_refresh_interval.is_zero()
            || self.authorization.acl_refresh_interval > MAX_DURATION
        {
            return bad(
                "authorization.acl_refresh_interval",
                "must be longer than zero and at most a week",
            );
        }
        if limits.max_frame_size < 1024 || limits.max_frame_size > i32_max {
            return bad(
                "limits.max_frame_size",
                "must be between 1024 and 2147483647 bytes",
            );
        }
        let one_frame = limits.max_frame_size + 4;
        if limits.max_buffered_request_bytes < one_frame {
            return Err(InvalidSetting {
                field: "limits.max_buffered_request_bytes",
                reason: format!(
                    "must hold one request of the largest frame size: at least {one_frame} bytes"
                ),
            });
        }
        if limits.small_request_bytes < 64 || limits.small_request_bytes > i32_max {
            return bad(
                "limits.small_request_bytes",
                "must be between 64 and 2147483647 bytes",
            );
        }
        let room = limits.max_buffered_request_bytes - one_frame;
        let small = limits.small_request_bytes.min(one_frame);
        if limits.small_request_reserve_bytes < small || limits.small_request_reserve_bytes > room {
            return Err(InvalidSetting {
                field: "limits.small_request_reserve_bytes",
                reason: format!(
                    "must hold one small request and leave room in the budget for one request of the largest frame size: between {small} and {room} bytes"
                ),
            });
        }
        if limits.max_decompressed_batch_bytes == 0 || limits.max_decompressed_batch_bytes > i32_max
        {
            return bad(
                "limits.max_decompressed_batch_bytes",
                "must be between 1 and 2147483647 bytes",
            );
        }
        if limits.producer_state_recovery_bytes > i32_max {
            return bad(
                "limits.producer_state_recovery_bytes",
                "must be at most 2147483647 bytes",
            );
        }
        if limits.max_records_per_batch > i32_max {
            return bad("limits.max_records_per_batch", "must be at most 2147483647");
        }
        if limits.max_partitions_per_topic < 1 {
            return bad("limits.max_partitions_per_topic", "must be at least 1");
        }
        if self.auto_create_partitions < 1
            || self.auto_create_partitions > limits.max_partitions_per_topic
        {
            return Err(InvalidSetting {
                field: "auto_create_partitions",
                reason: format!(
                    "must be between 1 and the partition limit per topic ({})",
                    limits.max_partitions_per_topic
                ),
            });
        }
        self.transactions.check()?;
        let gs = &self.group_state;
        if gs.load_wait > Duration::from_secs(30) {
            return bad("group_state.load_wait", "must be at most 30 seconds");
        }
        if gs.load_retry_min < Duration::from_millis(1) || gs.load_retry_min > gs.load_retry_max {
            return bad(
                "group_state.load_retry_min",
                "must be at least 1 ms and at most load_retry_max",
            );
        }
        if gs.load_retry_max > Duration::from_secs(600) {
            return bad("group_state.load_retry_max", "must be at most 10 minutes");
        }
        if gs.recheck_interval < Duration::from_millis(10) || gs.recheck_interval > MAX_DURATION {
            return bad(
                "group_state.recheck_interval",
                "must be between 10 ms and 7 days",
            );
        }
        if limits.offsets_retention < Duration::from_secs(1)
            || limits.offsets_retention > MAX_OFFSETS_RETENTION
        {
            return bad(
                "limits.offsets_retention",
                "must be between 1 second and 3650 days",
            );
        }
        if limits.max_fetch_wait > MAX_DURATION {
            return bad("limits.max_fetch_wait", "must be at most 7 days");
        }
        if limits.producer_state_recovery_lag_wait > Duration::from_secs(300) {
            return bad(
                "limits.producer_state_recovery_lag_wait",
                "must be at most 300 seconds",
            );
        }
        for (field, value) in [
            ("limits.max_produce_timeout", limits.max_produce_timeout),
            (
                "limits.producer_id_expiration",
                limits.producer_id_expiration,
            ),
        ] {
            if value.is_zero() {
                return bad(field, "must be above zero");
            }
            if value > MAX_DURATION {
                return bad(field, "must be at most 7 days");
            }
        }
        for (field, value) in [
            (
                "limits.message_timestamp_before_max_ms",
                limits.message_timestamp_before_max_ms,
            ),
            (
                "limits.message_timestamp_after_max_ms",
                limits.message_timestamp_after_max_ms,
            ),
        ] {
            if value < 0 {
                return bad(field, "must be 0 or more");
            }
        }
        if limits.validation_threads > 512 {
            return bad("limits.validation_threads", "must be at most 512");
        }

        let timeouts = &self.timeouts;
        for (field, value, zero_ok) in [
            ("timeouts.idle", timeouts.idle, false),
            ("timeouts.read", timeouts.read, false),
            ("timeouts.write", timeouts.write, false),
            ("timeouts.shutdown_drain", timeouts.shutdown_drain, true),
        ] {
            if value.is_zero() && !zero_ok {
                return bad(field, "must be above zero");
            }
            if value > MAX_DURATION {
                return bad(field, "must be at most 7 days");
            }
        }
        if timeouts.close_linger > MAX_CLOSE_LINGER {
            return bad("timeouts.close_linger", "must be at most 10 seconds");
        }

        let topic = &self.default_topic_config;
        if topic.retention_ms == 0 || topic.retention_ms < -1 {
            return bad(
                "default_topic_config.retention_ms",
                "must be -1 (keep forever) or at least 1",
            );
        }
        if topic.retention_bytes == 0 || topic.retention_bytes < -1 {
            return bad(
                "default_topic_config.retention_bytes",
                "must be -1 (no size cap) or at least 1",
            );
        }
        if topic.max_message_bytes < 1 {
            return bad(
                "default_topic_config.max_message_bytes",
                "must be at least 1",
            );
        }

        let quotas = &self.quotas;
        if !quotas.request_percentage.is_finite() || quotas.request_percentage < 0.0 {
            return bad(
                "quotas.request_percentage",
                "must be 0 (unlimited) or a positive number",
            );
        }
        for (field, value) in [
            ("quotas.producer_byte_rate", quotas.producer_byte_rate),
            ("quotas.consumer_byte_rate", quotas.consumer_byte_rate),
        ] {
            if value > i64::MAX as u64 {
                return bad(field, "must be at most 9223372036854775807");
            }
        }
        if quotas.window_samples < 2 || quotas.window_samples > 1000 {
            return bad("quotas.window_samples", "must be between 2 and 1000");
        }
        if quotas.window_size < std::time::Duration::from_millis(1)
            || quotas.window_size > MAX_DURATION
        {
            return bad("quotas.window_size", "must be between 1 ms and 7 days");
        }
        if quotas.max_tracked_clients == 0 {
            return bad("quotas.max_tracked_clients", "must be at least 1");
        }
        if quotas.max_entities == 0 {
            return bad("quotas.max_entities", "must be at least 1");
        }
        Ok(())
    }
}
