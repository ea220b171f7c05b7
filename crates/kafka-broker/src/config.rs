//! Plain configuration for the broker layer. Every limit is named here with its default;
//! the gateway application fills this from files and the environment.

use crate::store::TopicConfig;
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
    /// Topics one request may create.
    pub max_topics_per_request: usize,
    /// Upper bound on a Fetch response, whatever the client asks for.
    pub max_fetch_response_bytes: usize,
    /// Upper bound on how long a Fetch may wait for data.
    pub max_fetch_wait: Duration,
    /// Largest decompressed size of one produced batch.
    pub max_decompressed_batch_bytes: usize,
    /// Most records in one produced batch.
    pub max_records_per_batch: usize,
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
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: Duration::from_secs(600),
            read: Duration::from_secs(30),
            write: Duration::from_secs(30),
            shutdown_drain: Duration::from_secs(10),
        }
    }
}

impl BrokerConfig {
    /// Checks the values that would make the broker misbehave.
    pub fn validate(&self) -> Result<(), crate::BrokerError> {
        let bad = |m: &str| Err(crate::BrokerError::Config(m.to_string()));
        if self.advertised_host.is_empty() {
            return bad("advertised host is empty");
        }
        if self.advertised_port == 0 {
            return bad("advertised port is 0");
        }
        if self.auto_create_partitions < 1
            || self.auto_create_partitions > self.limits.max_partitions_per_topic
        {
            return bad("auto-create partitions must be between 1 and max partitions per topic");
        }
        if self.limits.max_connections == 0 {
            return bad("max connections is 0");
        }
        if self.limits.max_frame_size < 1024 || self.limits.max_frame_size > i32::MAX as usize {
            return bad("max frame size must be between 1 KiB and 2 GiB");
        }
        if self.limits.max_buffered_request_bytes < self.limits.max_frame_size + 4 {
            return bad(
                "max buffered request bytes must hold at least one frame of max frame size",
            );
        }
        if self.limits.max_in_flight_per_connection == 0 {
            return bad("max in-flight requests per connection is 0");
        }
        if self.timeouts.idle.is_zero()
            || self.timeouts.read.is_zero()
            || self.timeouts.write.is_zero()
        {
            return bad("timeouts must be positive");
        }
        Ok(())
    }
}
