//! A small Kafka client to the other gateways sharing the store: what the transaction
//! coordinator sends to partition leaders (WriteTxnMarkers) and leaders to coordinators
//! (AddPartitionsToTxn `verify_only`).
//!
//! (Skeleton: connections per node id, authentication, timeouts.)

use crate::config::InterGatewayConfig;
use kafka_protocol::{RequestBody, ResponseBody};
use kafka_store::cluster::Membership;
use std::sync::Arc;
use std::time::Duration;

/// Why a call to another gateway failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    #[error("no address for node {0}")]
    NoAddress(i32),
    #[error("transport: {0}")]
    Transport(String),
    #[error("timed out")]
    Timeout,
}

/// Connections to the other gateways, one per node id.
pub(crate) struct PeerClient {
    config: InterGatewayConfig,
    membership: std::sync::Mutex<Option<Arc<dyn Membership>>>,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient")
            .field("listener", &self.config.listener)
            .finish()
    }
}

impl PeerClient {
    pub(crate) fn new(config: InterGatewayConfig) -> Self {
        PeerClient {
            config,
            membership: std::sync::Mutex::new(None),
        }
    }

    /// Finds gateways through `membership` from now on.
    pub(crate) fn follow(&self, membership: Arc<dyn Membership>) {
        *self
            .membership
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(membership);
    }

    /// Sends `body` (at its newest version both sides speak) to gateway `node_id` and
    /// waits for the answer at most `timeout`.
    pub(crate) async fn call(
        &self,
        node_id: i32,
        body: RequestBody,
        timeout: Duration,
    ) -> Result<ResponseBody, PeerError> {
        let _ = (body, timeout);
        Err(PeerError::NoAddress(node_id))
    }
}
