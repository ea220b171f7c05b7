//! Accepting connections, the connection cap, and graceful shutdown.
//!
//! `run` accepts until its shutdown future resolves. A semaphore caps open connections: a
//! connection beyond the cap is closed right after accept, with a log line. On shutdown
//! the listener is dropped (no new connections), every connection is told to stop reading
//! new requests, and the server waits up to the drain timeout for in-flight requests to be
//! answered before aborting what is left.

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection;
use crate::error::BrokerError;
use crate::store::{LogStore, OffsetStore};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

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
    config.validate()?;
    let drain = config.timeouts.shutdown_drain;
    let max_connections = config.limits.max_connections;
    let broker = Arc::new(Broker::new(config, stores));
    let permits = Arc::new(Semaphore::new(max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);

    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and similar: back off briefly rather
                        // than spinning on a listener that keeps failing.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    warn!(%peer, max_connections, "connection limit reached, closing new connection");
                    drop(socket);
                    continue;
                };
                debug!(%peer, "connection accepted");
                let broker = broker.clone();
                let stop = stop_rx.clone();
                connections.spawn(async move {
                    connection::serve(socket, peer, broker, stop).await;
                    drop(permit);
                });
            }
        }
    }

    drop(listener);
    info!(
        open = connections.len(),
        "shutting down: no new connections, draining in-flight requests"
    );
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            left = connections.len(),
            "drain timeout reached, closing remaining connections"
        );
        connections.shutdown().await;
    }
    info!("shutdown complete");
    Ok(())
}
