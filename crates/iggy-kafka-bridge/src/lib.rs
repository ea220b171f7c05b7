//! The Iggy bridge: Kafka's log and committed offsets stored in Apache Iggy.
//!
//! [`IggyBridge`] implements the broker's [`kafka_store::LogStore`] and
//! [`kafka_store::OffsetStore`] on the Iggy Rust SDK, so every Kafka record lives in
//! Iggy and native Iggy clients see the same data:
//!
//! ```text
//! config     BridgeConfig (validated) and the TopicMap (Kafka topic -> Iggy stream/topic)
//! mapping    one Kafka record <-> one Iggy message (value = payload, key and headers as
//!            user headers when lossless, else an envelope), batch framing, re-encoding
//! errors     the one table from Iggy errors to StoreError, and BridgeError
//! meta       the bridge's durable state in Iggy, shared by every gateway on it:
//!            committed offsets and group states per coordinator shard, topic settings,
//!            SCRAM credentials, Kafka ACL bindings (logs in generations, see its docs)
//! members    IggyMembership: gateway heartbeats with epochs in the meta stream, the
//!            live view and this gateway's lease (several gateways on one Iggy)
//! acls       IggyAclStore: the ACL store (CreateAcls, DeleteAcls) on the meta stream
//! compaction compacted topics: the cleaner's settings (log.cleaner.*), pass reports;
//!            the companion-topic layout is described there
//! connection building every Iggy client the bridge uses (address, TLS, socket options)
//! credentials SASL with the bridge: PLAIN checked by logging in to Iggy (successes
//!            cached briefly), SCRAM credentials in the meta stream
//! partition  PartitionId: a partition number valid in Kafka (i32) and Iggy (u32)
//! permissions Kafka authorization from the principal's own Iggy user's permissions
//! convert    offsets, counts and times between Kafka's i64 and Iggy's u64
//! bridge     IggyBridge: sessions and call timeouts, the topic cache, the append path
//!            with its per-partition send queues, reads and read-ahead, long polls,
//!            and the LogStore/OffsetStore impls (one submodule each)
//! ```
//!
//! Wiring it into a gateway:
//!
//! ```no_run
//! # async fn wire() -> Result<(), iggy_kafka_bridge::BridgeError> {
//! use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
//! let config = BridgeConfig::new("kafka-gateway", "secret");
//! let bridge = std::sync::Arc::new(IggyBridge::connect(config).await?);
//! let log: std::sync::Arc<dyn kafka_store::LogStore> = bridge.clone();
//! let offsets: std::sync::Arc<dyn kafka_store::OffsetStore> = bridge;
//! # let _ = (log, offsets); Ok(()) }
//! ```
//!
//! With SASL, the broker's credentials come from the same configuration and bridge:
//!
//! ```no_run
//! # async fn wire() -> Result<(), Box<dyn std::error::Error>> {
//! use iggy_kafka_bridge::{BridgeConfig, IggyBridge, IggyPlainAuthenticator};
//! let config = BridgeConfig {
//!     tls_enabled: true,
//!     tls_ca_file: Some("/etc/iggy/ca.pem".into()),
//!     ..BridgeConfig::new("kafka-gateway", "secret")
//! };
//! let plain: std::sync::Arc<dyn kafka_sasl::PlainAuthenticator> =
//!     std::sync::Arc::new(IggyPlainAuthenticator::new(&config)?);
//! let bridge = IggyBridge::connect(config).await?;
//! let scram: std::sync::Arc<dyn kafka_sasl::ScramCredentialStore> = bridge.scram_store();
//! # let _ = (plain, scram); Ok(()) }
//! ```
//!
//! See `docs/bridge.md` for the byte-level mapping, the error table and the limits.

pub mod acls;
mod bridge;
pub mod compaction;
pub mod config;
mod connection;
mod convert;
pub mod credentials;
pub mod errors;
pub mod mapping;
pub mod members;
mod meta;
mod metrics;
mod partition;
pub mod permissions;
pub mod polled;
pub mod proof;

pub use acls::IggyAclStore;
pub use bridge::{IggyBridge, LeaderFn};
pub use compaction::{CleanerConfig, PassReport, PassStep};
pub use config::{BridgeConfig, IggyTopicRef, TopicMap};
pub use credentials::{IggyPlainAuthenticator, IggyScramStore};
pub use errors::{BridgeError, Op, map_iggy_error};
pub use members::{IggyMembership, JoinSettings};
pub use permissions::IggyPermissions;
