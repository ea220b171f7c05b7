//! Accepting connections, the connection cap, and graceful shutdown.
//!
//! [`Server`] puts the pieces together: the stores, the request pipeline (the built-in
//! layers, then any the embedder adds), the metrics, and the `/health`, `/ready` and
//! `/metrics` endpoint. Each accepted connection gets a [`Session`].
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
use crate::metrics::{Metrics, MetricsLayer, ReasonLabel, http};
use crate::pipeline::client_info::ClientInfo;
use crate::pipeline::quotas::QuotaLayer;
use crate::pipeline::{Layer, Pipeline};
use crate::quotas::{MemoryQuotaStore, QuotaStore, Quotas};
use crate::session::{Listener, Session};
use crate::store::{LogStore, OffsetStore};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// A broker ready to serve: configuration, stores, the request pipeline's layers and
/// the optional observability endpoint.
#[derive(Debug)]
pub struct Server {
    config: BrokerConfig,
    stores: Stores,
    listener: Listener,
    layers: Vec<Arc<dyn Layer>>,
    metrics: Option<Arc<Metrics>>,
    http: Option<TcpListener>,
    quota_store: Arc<dyn QuotaStore>,
}

impl Server {
    /// A server for `stores`, with the default single PLAINTEXT listener, no extra layers
    /// and no metrics.
    pub fn new(config: BrokerConfig, stores: Stores) -> Server {
        Server {
            config,
            stores,
            listener: Listener::plaintext(),
            layers: Vec::new(),
            metrics: None,
            http: None,
            quota_store: Arc::new(MemoryQuotaStore::default()),
        }
    }

    /// Keeps client quotas set with AlterClientQuotas in `store` (in memory by default).
    pub fn quota_store(mut self, store: Arc<dyn QuotaStore>) -> Server {
        self.quota_store = store;
        self
    }

    /// The listener connections are accepted on (name and security protocol, as sessions
    /// and metrics report them).
    pub fn listener(mut self, listener: Listener) -> Server {
        self.listener = listener;
        self
    }

    /// Adds an innermost layer to the request pipeline (after the built-in ones).
    pub fn layer(mut self, layer: Arc<dyn Layer>) -> Server {
        self.layers.push(layer);
        self
    }

    /// Records into `metrics` (with the metrics layer outermost in the pipeline).
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Server {
        self.metrics = Some(metrics);
        self
    }

    /// Serves `/health`, `/ready` and (with [`Server::metrics`]) `/metrics` on `listener`.
    pub fn http(mut self, listener: TcpListener) -> Server {
        self.http = Some(listener);
        self
    }

    /// Serves Kafka clients on `listener` until `shutdown` resolves, then stops
    /// accepting, lets in-flight requests finish within the drain timeout, and returns.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), BrokerError> {
        self.config.validate()?;
        let mut pipeline = Pipeline::default();
        if let Some(m) = &self.metrics {
            pipeline.push(Arc::new(MetricsLayer::new(m.clone())));
        }
        pipeline.push(Arc::new(ClientInfo));
        let quotas = Arc::new(Quotas::new(self.config.quotas.clone(), self.quota_store)?);
        pipeline.push(Arc::new(QuotaLayer::new(quotas.clone())));
        for layer in self.layers {
            pipeline.push(layer);
        }
        debug!(layers = ?pipeline.names(), "request pipeline");
        let drain = self.config.timeouts.shutdown_drain;
        let max_connections = self.config.limits.max_connections;
        let broker = Arc::new(Broker::with_quotas(
            self.config,
            self.stores,
            pipeline,
            quotas,
        ));
        let permits = Arc::new(Semaphore::new(max_connections));
        let (stop_tx, stop_rx) = watch::channel(false);
        let listening = Arc::new(AtomicBool::new(true));
        let endpoint = self.http.map(|http| {
            let endpoint = http::Endpoint {
                metrics: self.metrics.clone(),
                broker: broker.clone(),
                listening: listening.clone(),
                scrape_lock: Arc::default(),
            };
            tokio::spawn(http::serve(http, endpoint, stop_rx.clone()))
        });
        let refused = self.metrics.as_ref().map(|m| {
            m.connections_refused
                .get_or_create(&ReasonLabel {
                    reason: "max_connections",
                })
                .clone()
        });
        let listener_info = self.listener;
        let mut next_id = 0u64;
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
                        if let Some(c) = &refused {
                            c.inc();
                        }
                        drop(socket);
                        continue;
                    };
                    let _ = socket.set_nodelay(true);
                    next_id += 1;
                    let session = Session::new(next_id, listener_info.clone(), peer);
                    debug!(%peer, id = next_id, "connection accepted");
                    let broker = broker.clone();
                    let stop = stop_rx.clone();
                    connections.spawn(async move {
                        connection::serve(socket, session, broker, stop).await;
                        drop(permit);
                    });
                }
            }
        }

        listening.store(false, Ordering::Release);
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
        if let Some(endpoint) = endpoint {
            endpoint.abort();
        }
        info!("shutdown complete");
        Ok(())
    }
}

/// Serves Kafka clients on `listener` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish within the drain timeout, and returns. The same as
/// `Server::new(config, stores).serve(listener, shutdown)`.
pub async fn run(
    listener: TcpListener,
    config: BrokerConfig,
    stores: Stores,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), BrokerError> {
    Server::new(config, stores).serve(listener, shutdown).await
}
