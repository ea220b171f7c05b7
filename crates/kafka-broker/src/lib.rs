//! The broker layer of the Kafka gateway.
//!
//! ```text
//! TcpListener -> server (accept, connection cap, a Session per connection, shutdown)
//!             -> connection (framing, timeouts, in-order pipelined responses)
//!             -> dispatch (version firewall, decode)
//!             -> pipeline layers (client info, metrics, ... ) -> handlers::<api> -> store traits
//! ```
//!
//! - [`authz`]: Kafka's ACL model and the API -> operation table (not enforced yet).
//! - [`session`]: what the broker knows about one connection.
//! - [`pipeline`]: the [`pipeline::Layer`] trait every cross-cutting concern implements.
//! - [`tls`]: the TLS acceptor of SSL and SASL_SSL listeners, reloading its certificate.
//! - [`cluster`]: placement of partitions and groups over the live gateways.
//! - [`metrics`]: Prometheus metrics and the `/metrics`, `/health`, `/ready` endpoint.
//!
//! - [`store`]: the [`store::LogStore`] and [`store::OffsetStore`] traits this layer owns,
//!   and the embedded in-memory backend ([`store::memory::MemoryStore`]).
//! - [`server::run`]: serves Kafka clients on a listener until a shutdown future resolves.
//! - `handlers`: one module per Kafka API; handlers see typed requests and stores,
//!   never sockets.
//! - [`config::BrokerConfig`]: every limit and timeout, with defaults.

pub mod authz;
mod broker;
mod budget;
pub mod cluster;
pub mod config;
mod connection;
mod cpu;
mod dispatch;
mod frame_pool;
mod groups;
mod handlers;
pub mod metrics;
mod peer;
pub mod pipeline;
mod producers;
pub mod quotas;
pub mod session;
pub mod tls;
mod txns;
#[doc(hidden)]
pub use handlers::produce::check_with_defaults;
/// The storage seam (re-exported from the `kafka-store` crate).
pub use kafka_store as store;

pub use config::{
    BrokerConfig, GroupStateSettings, InterGatewayConfig, Limits, Timeouts, TransactionSettings,
};
pub use kafka_groups::GroupConfig;
pub mod error;
pub mod server;

pub use error::BrokerError;
pub use server::{BoundListener, Server, Stores, run};

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod tests;
