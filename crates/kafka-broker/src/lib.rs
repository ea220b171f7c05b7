//! The broker layer of the Kafka gateway.
//!
//! ```text
//! TcpListener -> server (accept, connection cap, shutdown)
//!             -> connection (framing, timeouts, in-order pipelined responses)
//!             -> dispatch (version firewall) -> handlers::<api> -> store traits
//! ```
//!
//! - [`store`]: the [`store::LogStore`] and [`store::OffsetStore`] traits this layer owns,
//!   and the embedded in-memory backend ([`store::memory::MemoryStore`]).
//! - [`server::run`]: serves Kafka clients on a listener until a shutdown future resolves.
//! - `handlers`: one module per Kafka API; handlers see typed requests and stores,
//!   never sockets.
//! - [`config::BrokerConfig`]: every limit and timeout, with defaults.

mod broker;
pub mod config;
mod connection;
mod dispatch;
mod groups;
mod handlers;
mod producers;
/// The storage seam (re-exported from the `kafka-store` crate).
pub use kafka_store as store;

pub use config::{BrokerConfig, Limits, Timeouts};
pub use kafka_groups::GroupConfig;
pub mod error;
pub mod server;

pub use error::BrokerError;
pub use server::{Stores, run};

#[cfg(test)]
mod tests;
