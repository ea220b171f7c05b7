//! Accepting connections and shutting down gracefully (implementation in progress).

use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::store::{LogStore, OffsetStore};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The backends the broker serves from.
#[derive(Clone)]
pub struct Stores {
    /// Topics and records.
    pub log: Arc<dyn LogStore>,
    /// Committed group offsets.
    pub offsets: Arc<dyn OffsetStore>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("log", &self.log.name())
            .finish()
    }
}

/// Serves Kafka clients on `listener` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish within the drain timeout, and returns.
pub async fn run(
    listener: TcpListener,
    config: BrokerConfig,
    stores: Stores,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), BrokerError> {
    let _ = (listener, config, stores);
    shutdown.await;
    Ok(())
}
