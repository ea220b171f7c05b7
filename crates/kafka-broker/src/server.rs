//! Accepting connections, the connection cap, and graceful shutdown.
//!
//! [`Server`] puts the pieces together: the stores, the request pipeline (the built-in
//! layers, then any the embedder adds), the metrics, and the `/health`, `/ready` and
//! `/metrics` endpoint. Each accepted connection gets a [`Session`].
//!
//! `run` accepts until its shutdown future resolves. [`Server::serve_listeners`] serves
//! several listeners at once (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), each with its
//! own advertised address; TLS handshakes run in the connection's task (see [`crate::tls`]),
//! after the connection has taken its slots. Open connections are capped in all
//! (`max_connections`) and per IP address (`max_connections_per_ip`, with per-address
//! overrides): a connection beyond a cap is closed right after accept. Refusals are
//! logged at most once per [`REFUSAL_LOG_EVERY`] with how many there were, so a flood
//! does not flood the log. New connections are accepted at most
//! `max_connection_creation_rate` per second (a token bucket holding one second's
//! worth): past it the server waits before accepting the next, leaving the rest in the
//! listen backlog, as Kafka throttles accept.
//!
//! What a connection holds while open is its task and buffers (see the connection
//! module), its session, and one counter in the per-address table, removed with the
//! last connection of the address. On shutdown
//! the listener is dropped (no new connections), every connection is told to stop reading
//! new requests, and the server waits up to the drain timeout for in-flight requests to be
//! answered before aborting what is left.

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection;
use crate::error::BrokerError;
use crate::metrics::{Metrics, MetricsLayer, ReasonLabel, http};
use crate::pipeline::authentication::Authentication;
use crate::pipeline::authorization::Authorization;
use crate::pipeline::client_info::ClientInfo;
use crate::pipeline::quotas::QuotaLayer;
use crate::pipeline::{Layer, Pipeline};
use crate::quotas::{MemoryQuotaStore, QuotaStore, Quotas};
use crate::session::{Listener, Session};
use crate::store::cluster::{Member, MemberListener, Membership, SingleMember};
use crate::store::{LogStore, OffsetStore};
use crate::tls::TlsAcceptor;
use kafka_authz::store::{AclStore, MemoryAclStore};
use kafka_authz::{AclAuthorizer, Authorizer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
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

/// Whether requests are authorized: as configured, or (unset) when some listener
/// authenticates its clients: SASL, or SSL requiring client certificates.
pub fn authorization_enabled(config: &BrokerConfig, listeners: &[BoundListener]) -> bool {
    config.authorization.enabled.unwrap_or_else(|| {
        listeners.iter().any(|l| {
            l.listener.protocol.uses_sasl()
                || (l.listener.protocol == crate::session::SecurityProtocol::Ssl
                    && l.tls
                        .as_ref()
                        .is_some_and(TlsAcceptor::requires_client_certificates))
        })
    })
}

/// One listening socket and what it expects: the name, protocol and advertised address
/// sessions report, and the TLS acceptor an SSL or SASL_SSL listener needs.
#[derive(Debug)]
pub struct BoundListener {
    /// The bound socket.
    pub tcp: TcpListener,
    /// Name, security protocol and advertised address.
    pub listener: Listener,
    /// Required when the protocol uses TLS, ignored otherwise.
    pub tls: Option<TlsAcceptor>,
}

impl BoundListener {
    /// A listener without TLS.
    pub fn new(tcp: TcpListener, listener: Listener) -> BoundListener {
        BoundListener {
            tcp,
            listener,
            tls: None,
        }
    }

    /// With `tls` for its handshakes.
    pub fn with_tls(mut self, tls: TlsAcceptor) -> BoundListener {
        self.tls = Some(tls);
        self
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
    metrics_token: Option<Arc<http::MetricsToken>>,
    quota_store: Arc<dyn QuotaStore>,
    authenticator: Option<Arc<kafka_sasl::Authenticator>>,
    acl_store: Arc<dyn AclStore>,
    authorizers: Vec<Arc<dyn Authorizer>>,
    membership: Option<Arc<dyn Membership>>,
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
            metrics_token: None,
            quota_store: Arc::new(MemoryQuotaStore::default()),
            authenticator: None,
            acl_store: Arc::new(MemoryAclStore::new()),
            authorizers: Vec::new(),
            membership: None,
        }
    }

    /// Routes by `membership`: partitions this gateway does not lead and groups it does
    /// not coordinate are refused, so clients go to their owner (see
    /// [`crate::cluster`]). By default the gateway is alone: itself, with its listeners'
    /// advertised addresses, leading every partition.
    pub fn membership(mut self, membership: Arc<dyn Membership>) -> Server {
        self.membership = Some(membership);
        self
    }

    /// Keeps ACL bindings (CreateAcls, DeleteAcls) in `store` (in memory by default); its
    /// bindings are read at start and every `authorization.acl_refresh_interval`.
    pub fn acl_store(mut self, store: Arc<dyn AclStore>) -> Server {
        self.acl_store = store;
        self
    }

    /// Adds a source of authorization decisions besides the ACLs (the principal's Iggy
    /// permissions with the bridge): a request is allowed only where every source allows
    /// it.
    pub fn authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Server {
        self.authorizers.push(authorizer);
        self
    }

    /// Authenticates the connections of SASL listeners with `authenticator` (required
    /// when a listener uses SASL), and serves the SCRAM credential APIs from its store.
    pub fn authenticator(mut self, authenticator: Arc<kafka_sasl::Authenticator>) -> Server {
        self.authenticator = Some(authenticator);
        self
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

    /// `/metrics` answers only requests that carry this bearer token.
    pub fn metrics_token(mut self, token: Arc<http::MetricsToken>) -> Server {
        self.metrics_token = Some(token);
        self
    }

    /// Serves Kafka clients on `listener` until `shutdown` resolves, then stops
    /// accepting, lets in-flight requests finish within the drain timeout, and returns.
    /// The listener is the one set with [`Server::listener`] (PLAINTEXT by default).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), BrokerError> {
        let bound = BoundListener::new(listener, self.listener.clone());
        self.serve_listeners(vec![bound], shutdown).await
    }

    /// Serves Kafka clients on every listener until `shutdown` resolves, like
    /// [`Server::serve`]. The connection caps, per-address caps and creation rate apply
    /// to all listeners together; each connection's session names its listener.
    pub async fn serve_listeners(
        self,
        listeners: Vec<BoundListener>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), BrokerError> {
        self.config.validate()?;
        if listeners.is_empty() {
            return Err(BrokerError::Config("no listener to serve".into()));
        }
        for l in &listeners {
            if l.listener.protocol.uses_tls() && l.tls.is_none() {
                return Err(BrokerError::Config(format!(
                    "listener {} ({}) needs a TLS certificate and key",
                    l.listener.name, l.listener.protocol
                )));
            }
        }
        if let Some(m) = &self.membership
            && m.me().node_id != self.config.node_id
        {
            return Err(BrokerError::Config(format!(
                "the membership is node {}, the broker is node {}",
                m.me().node_id,
                self.config.node_id
            )));
        }
        let mut pipeline = Pipeline::default();
        if let Some(m) = &self.metrics {
            pipeline.push(Arc::new(MetricsLayer::new(m.clone())));
        }
        pipeline.push(Arc::new(ClientInfo));
        if let Some(l) = listeners.iter().find(|l| l.listener.protocol.uses_sasl())
            && self.authenticator.is_none()
        {
            return Err(BrokerError::Config(format!(
                "listener {} uses SASL but no authenticator is configured",
                l.listener.name
            )));
        }
        let authentication = self.authenticator.map(|a| {
            Arc::new(Authentication::new(
                a,
                self.config.sasl.clone(),
                self.metrics.clone(),
            ))
        });
        if let Some(a) = &authentication {
            pipeline.push(a.clone());
        }
        let quotas = Arc::new(Quotas::new(self.config.quotas.clone(), self.quota_store)?);
        pipeline.push(Arc::new(QuotaLayer::new(quotas.clone())));
        let acls = Arc::new(AclAuthorizer::new(
            self.acl_store,
            self.config.authorization.allow_everyone_if_no_acl_found,
        ));
        acls.reload()
            .await
            .map_err(|e| BrokerError::Config(format!("cannot read the ACL bindings: {e}")))?;
        let authorizing = authorization_enabled(&self.config, &listeners);
        if authorizing {
            pipeline.push(Arc::new(Authorization::new(
                acls.clone(),
                self.authorizers.clone(),
                self.config.sasl.super_users.clone(),
                self.stores.log.clone(),
                self.config.auto_create_topics,
                self.config.limits.max_entries_per_request,
            )));
        }
        for layer in self.layers {
            pipeline.push(layer);
        }
        debug!(layers = ?pipeline.names(), "request pipeline");
        let drain = self.config.timeouts.shutdown_drain;
        let max_connections = self.config.limits.max_connections;
        let mut broker = Broker::with_quotas(self.config, self.stores, pipeline, quotas);
        broker.authentication = authentication;
        broker.acls = acls;
        broker.authorizers = self.authorizers;
        broker.authorization_enabled = authorizing;
        let membership: Arc<dyn Membership> = match self.membership {
            Some(m) => m,
            None => Arc::new(SingleMember::new(Member {
                node_id: broker.config.node_id,
                epoch: 0,
                listeners: listeners
                    .iter()
                    .map(|l| {
                        let (host, port) = l.listener.advertised_or(
                            &broker.config.advertised_host,
                            broker.config.advertised_port,
                        );
                        MemberListener {
                            name: l.listener.name.to_string(),
                            host: host.to_owned(),
                            port,
                        }
                    })
                    .collect(),
            })),
        };
        broker.set_membership(membership);
        let broker = Arc::new(broker);
        broker.txn_router.attach(Arc::downgrade(&broker));
        let permits = Arc::new(Semaphore::new(max_connections));
        let (stop_tx, stop_rx) = watch::channel(false);
        let listening = Arc::new(AtomicBool::new(true));
        let endpoint = self.http.map(|http| {
            let endpoint = http::Endpoint {
                metrics: self.metrics.clone(),
                broker: broker.clone(),
                listening: listening.clone(),
                scrape_lock: Arc::default(),
                token: self.metrics_token.clone(),
            };
            tokio::spawn(http::serve(http, endpoint, stop_rx.clone()))
        });
        let refused_counter = |reason: &'static str| {
            self.metrics.as_ref().map(|m| {
                m.connections_refused
                    .get_or_create(&ReasonLabel { reason })
                    .clone()
            })
        };
        let refused = refused_counter("max_connections");
        let refused_ip = refused_counter("max_connections_per_ip");
        let per_ip = Arc::new(PerIp::new(&broker.config.limits));
        let mut bucket = Bucket::new(broker.config.limits.max_connection_creation_rate);
        let mut refusals = RefusalLog::default();
        let mut next_id = 0u64;
        let mut connections = JoinSet::new();
        // One file watcher per distinct TLS configuration.
        let mut watched: Vec<TlsAcceptor> = Vec::new();
        for tls in listeners.iter().filter_map(|l| l.tls.as_ref()) {
            if !watched.iter().any(|w| w.same_as(tls)) {
                watched.push(tls.clone());
            }
        }
        let watchers: Vec<_> = watched
            .into_iter()
            .map(|tls| tokio::spawn(tls.watch(stop_rx.clone())))
            .collect();
        let acl_refresh = tokio::spawn(refresh_acls(
            broker.acls.clone(),
            broker.config.authorization.acl_refresh_interval,
            stop_rx.clone(),
        ));
        let pool_release = tokio::spawn(release_idle_buffers(
            Arc::clone(&broker.frame_pool),
            broker.config.limits.frame_pool_idle,
            stop_rx.clone(),
        ));
        // Where the next accept looks first, so a flood on one listener does not starve
        // the others.
        let mut first = 0usize;
        tokio::pin!(shutdown);

        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                // Over the creation rate: wait for the next token before accepting.
                () = tokio::time::sleep_until(bucket.ready_at()), if !bucket.ready() => {}
                (index, accepted) = accept_any(&listeners, first), if bucket.ready() => {
                    first = (index + 1) % listeners.len();
                    let (socket, peer) = match accepted {
                        Ok((socket, peer)) => (socket, crate::session::canonical_peer(peer)),
                        Err(e) => {
                            // Out of file descriptors and similar: back off briefly rather
                            // than spinning on a listener that keeps failing.
                            warn!(error = %e, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    bucket.take();
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        refusals.refused(peer.ip(), "max_connections");
                        if let Some(c) = &refused {
                            c.inc();
                        }
                        drop(socket);
                        continue;
                    };
                    let Some(slot) = PerIp::take(&per_ip, peer.ip()) else {
                        refusals.refused(peer.ip(), "max_connections_per_ip");
                        if let Some(c) = &refused_ip {
                            c.inc();
                        }
                        drop(socket);
                        continue;
                    };
                    let _ = socket.set_nodelay(true);
                    next_id += 1;
                    let bound = &listeners[index];
                    let mut session = Session::new(next_id, bound.listener.clone(), peer);
                    debug!(%peer, id = next_id, listener = %bound.listener.name, "connection accepted");
                    let broker = broker.clone();
                    let stop = stop_rx.clone();
                    let tls = bound.tls.clone().filter(|_| bound.listener.protocol.uses_tls());
                    connections.spawn(async move {
                        // The handshake runs here, holding the connection's slots.
                        match tls {
                            None => connection::serve(socket, session, broker, stop).await,
                            Some(tls) => {
                                if let Some(accepted) =
                                    tls.accept(socket, session.listener.protocol).await
                                {
                                    if let Some(principal) = accepted.principal {
                                        session.principal = principal;
                                    }
                                    connection::serve(accepted.stream, session, broker, stop)
                                        .await;
                                }
                            }
                        }
                        drop(slot);
                        drop(permit);
                    });
                }
            }
        }

        listening.store(false, Ordering::Release);
        drop(listeners);
        for watcher in &watchers {
            watcher.abort();
        }
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
        acl_refresh.abort();
        pool_release.abort();
        if let Some(endpoint) = endpoint {
            endpoint.abort();
        }
        info!("shutdown complete");
        Ok(())
    }
}

/// Reads the ACL bindings from their store every `every` until `stop` turns true, for
/// changes made elsewhere (another gateway sharing the store). A failed read keeps the
/// last snapshot; failures are logged when they start, then at most once a minute, and
/// the recovery once.
async fn refresh_acls(acls: Arc<AclAuthorizer>, every: Duration, stop: watch::Receiver<bool>) {
    const WARN_EVERY: Duration = Duration::from_secs(60);
    let mut ticks = Ticks::new(every, stop);
    let mut last_warn: Option<std::time::Instant> = None;
    let mut failures = 0u64;
    while ticks.next().await {
        match acls.reload().await {
            Ok(()) => {
                if failures > 0 {
                    info!(failures, "ACL bindings read again after failures");
                }
                failures = 0;
                last_warn = None;
            }
            Err(e) => {
                failures += 1;
                if last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                    last_warn = Some(std::time::Instant::now());
                    warn!(error = %e, failures, "cannot read the ACL bindings; decisions keep the last snapshot");
                }
            }
        }
    }
}

/// Frees the frame pool's buffers left idle for `idle`, checking every half of it, until
/// `stop` turns true; a zero `idle` keeps them.
async fn release_idle_buffers(
    pool: Arc<crate::frame_pool::FramePool>,
    idle: Duration,
    stop: watch::Receiver<bool>,
) {
    if idle.is_zero() {
        return;
    }
    let mut ticks = Ticks::new((idle / 2).max(Duration::from_millis(1)), stop);
    while ticks.next().await {
        let Some(before) = std::time::Instant::now().checked_sub(idle) else {
            continue;
        };
        let freed = pool.release_idle(before);
        if freed > 0 {
            debug!(freed, "freed read buffers left idle");
        }
    }
}

/// A timer for the server's periodic tasks: ticks every `every` (the first one `every`
/// after it starts; late ticks are delayed, not bunched) until `stop` turns true.
struct Ticks {
    tick: tokio::time::Interval,
    stop: watch::Receiver<bool>,
}

impl Ticks {
    fn new(every: Duration, stop: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticks { tick, stop }
    }

    /// Waits for the next tick: true then, false once stopped.
    async fn next(&mut self) -> bool {
        loop {
            tokio::select! {
                _ = self.tick.tick() => return true,
                changed = self.stop.changed() => {
                    if changed.is_err() || *self.stop.borrow() {
                        return false;
                    }
                }
            }
        }
    }
}

/// Accepts on whichever listener has a connection waiting, looking at `first` before
/// the others; returns the listener's index with the result.
async fn accept_any(
    listeners: &[BoundListener],
    first: usize,
) -> (usize, std::io::Result<(TcpStream, SocketAddr)>) {
    std::future::poll_fn(|cx| {
        let n = listeners.len();
        for k in 0..n {
            let i = (first + k) % n;
            if let Poll::Ready(result) = listeners[i].tcp.poll_accept(cx) {
                return Poll::Ready((i, result));
            }
        }
        Poll::Pending
    })
    .await
}

/// At most one refusal line per this long.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Open connections per IP address.
#[derive(Debug)]
struct PerIp {
    max: usize,
    overrides: std::collections::BTreeMap<IpAddr, usize>,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection counted for its address; uncounted on drop.
struct IpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    fn new(limits: &crate::config::Limits) -> PerIp {
        PerIp {
            max: limits.max_connections_per_ip,
            overrides: limits.max_connections_per_ip_overrides.clone(),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // Plain counters updated without panicking code: a poisoned lock is still sound.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a connection from `ip`, unless the address is at its cap.
    fn take(table: &Arc<PerIp>, ip: IpAddr) -> Option<IpSlot> {
        let cap = table.overrides.get(&ip).copied().unwrap_or(table.max);
        let mut open = table.lock();
        let n = open.entry(ip).or_default();
        if *n >= cap {
            if *n == 0 {
                open.remove(&ip);
            }
            return None;
        }
        *n += 1;
        Some(IpSlot {
            table: table.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Token bucket for new connections: `rate` per second, holding one second's worth.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32) -> Bucket {
        let rate = f64::from(rate.max(1));
        Bucket {
            rate,
            tokens: rate,
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let gained = now.duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + gained).min(self.rate);
        self.at = now;
    }

    fn ready(&mut self) -> bool {
        self.refill();
        self.tokens >= 1.0
    }

    /// When the next token is there.
    fn ready_at(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + Duration::from_secs_f64(missing / self.rate)
    }

    fn take(&mut self) {
        self.refill();
        self.tokens -= 1.0;
    }
}

/// Refused connections, logged at most once per [`REFUSAL_LOG_EVERY`] with the count.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    since: u64,
}

impl RefusalLog {
    fn refused(&mut self, ip: IpAddr, limit: &'static str) {
        self.since += 1;
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_EVERY)
        {
            return;
        }
        warn!(
            peer = %ip,
            limit,
            refused = self.since,
            "connection limit reached, closing new connections (count since the last such line)"
        );
        self.last = Some(now);
        self.since = 0;
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
