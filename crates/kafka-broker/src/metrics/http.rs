//! The observability endpoint: `GET /metrics`, `GET /health`, `GET /ready` over HTTP/1.1.
//!
//! HTTP/1.1 by hyper, bounded: one request per connection (no keep-alive), the request
//! head read within [`HEAD_TIMEOUT`] and at most [`MAX_HEAD`] bytes, a connection open
//! at most [`CONNECTION_TIMEOUT`], at most [`MAX_CONNECTIONS`] connections at once
//! (further ones are closed at once). Only `GET` and `HEAD` are served. With a token
//! ([`MetricsToken`]) `/metrics` answers only `Authorization: Bearer <token>`; a wrong
//! or missing one waits [`TOKEN_FAILURE_DELAY`] for its 401, so guessing runs at most
//! [`MAX_CONNECTIONS`] tries per delay.
//!
//! - `/health`: 200 while the process serves at all.
//! - `/ready`: 200 when the Kafka listener accepts connections and the store answers a
//!   ping within [`PING_TIMEOUT`]; 503 with the reason otherwise (for example while the
//!   Iggy server is down), and 200 again once it is back.
//! - `/metrics`: the registry after refreshing what is read at scrape time (partition
//!   offsets, consumer lag, groups, request memory), in Prometheus' text format.

use super::Metrics;
use crate::broker::Broker;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::{debug, warn};

/// Longest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Time allowed to send the request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long `/ready` waits for the store.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a scrape may spend reading partition offsets and committed offsets.
pub const REFRESH_BUDGET: Duration = Duration::from_secs(5);
/// Partitions whose offsets and lag a scrape reports at most.
pub const MAX_PARTITION_SERIES: usize = 10_000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartitionLabels {
    topic: String,
    partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LagLabels {
    group: String,
    topic: String,
    partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GroupLabel {
    group: String,
}

/// The metrics refreshed at scrape time.
#[derive(Debug)]
pub(crate) struct ScrapeGauges {
    log_start: Family<PartitionLabels, Gauge>,
    log_end: Family<PartitionLabels, Gauge>,
    committed: Family<LagLabels, Gauge>,
    lag: Family<LagLabels, Gauge>,
    groups: Family<StateLabel, Gauge>,
    members: Family<GroupLabel, Gauge>,
    generation: Family<GroupLabel, Gauge>,
    rebalances: Counter,
    producer_recoveries: Counter,
    producer_recovery_failures: Counter,
    producer_recovery_bytes: Counter,
    producers_recovered: Counter,
    producer_recovery_reads_behind: Counter,
    producer_recoveries_behind_accepted: Counter,
    memory_in_use: Gauge,
    memory_budget: Gauge,
    frame_pool_idle: Gauge,
    frame_pool_lent_ahead: Gauge,
    responses_queued: Gauge,
    store_up: Gauge,
    truncated: Gauge,
    txn_ids: Gauge,
    txns_open: Gauge,
    txn_marker_jobs: Gauge,
    txn_index_rebuilds: Counter,
    txn_index_rebuild_failures: Counter,
    txn_index_rebuild_bytes: Counter,
    txn_markers_written: Counter,
}

impl ScrapeGauges {
    pub(crate) fn register(reg: &mut Registry) -> ScrapeGauges {
        let g = ScrapeGauges {
            log_start: Family::default(),
            log_end: Family::default(),
            committed: Family::default(),
            lag: Family::default(),
            groups: Family::default(),
            members: Family::default(),
            generation: Family::default(),
            rebalances: Counter::default(),
            producer_recoveries: Counter::default(),
            producer_recovery_failures: Counter::default(),
            producer_recovery_bytes: Counter::default(),
            producers_recovered: Counter::default(),
            producer_recovery_reads_behind: Counter::default(),
            producer_recoveries_behind_accepted: Counter::default(),
            memory_in_use: Gauge::default(),
            memory_budget: Gauge::default(),
            frame_pool_idle: Gauge::default(),
            frame_pool_lent_ahead: Gauge::default(),
            responses_queued: Gauge::default(),
            store_up: Gauge::default(),
            truncated: Gauge::default(),
            txn_ids: Gauge::default(),
            txns_open: Gauge::default(),
            txn_marker_jobs: Gauge::default(),
            txn_index_rebuilds: Counter::default(),
            txn_index_rebuild_failures: Counter::default(),
            txn_index_rebuild_bytes: Counter::default(),
            txn_markers_written: Counter::default(),
        };
        reg.register(
            "partition_log_start_offset",
            "First offset still stored, by topic and partition",
            g.log_start.clone(),
        );
        reg.register(
            "partition_log_end_offset",
            "High watermark (next offset to be written), by topic and partition",
            g.log_end.clone(),
        );
        reg.register(
            "consumer_group_committed_offset",
            "Committed offset, by group, topic and partition",
            g.committed.clone(),
        );
        reg.register(
            "consumer_group_lag",
            "Records between the committed offset and the high watermark, by group, topic and partition",
            g.lag.clone(),
        );
        reg.register(
            "consumer_groups",
            "Consumer groups known to the coordinator, by state",
            g.groups.clone(),
        );
        reg.register(
            "consumer_group_members",
            "Members of each consumer group",
            g.members.clone(),
        );
        reg.register(
            "consumer_group_generation",
            "Current generation of each consumer group",
            g.generation.clone(),
        );
        reg.register(
            "consumer_group_rebalances",
            "Rebalances completed over all groups since start",
            g.rebalances.clone(),
        );
        for (name, help, counter) in [
            (
                "producer_state_recoveries",
                "Partitions whose idempotent producer state was rebuilt from the log since start",
                &g.producer_recoveries,
            ),
            (
                "producer_state_recovery_failures",
                "Producer state recoveries that failed (store error, timeout, view change)",
                &g.producer_recovery_failures,
            ),
            (
                "producer_states_recovered",
                "Per-partition producer states rebuilt from the log since start",
                &g.producers_recovered,
            ),
            (
                "producer_state_recovery_reads_behind",
                "Producer state recovery reads that lacked batches this gateway saw confirmed \
                 (not installed; the log is read again)",
                &g.producer_recovery_reads_behind,
            ),
            (
                "producer_state_recoveries_behind_accepted",
                "Producer state recoveries installed from a log still lacking batches this \
                 gateway saw confirmed, after the lag wait",
                &g.producer_recoveries_behind_accepted,
            ),
        ] {
            reg.register(name, help, counter.clone());
        }
        reg.register_with_unit(
            "producer_state_recovery_read",
            "Bytes read from the store to rebuild producer state since start",
            Unit::Bytes,
            g.producer_recovery_bytes.clone(),
        );
        reg.register_with_unit(
            "request_memory_in_use",
            "Request bytes buffered now, out of the request memory budget",
            Unit::Bytes,
            g.memory_in_use.clone(),
        );
        reg.register_with_unit(
            "request_memory_budget",
            "The request memory budget (max buffered request bytes)",
            Unit::Bytes,
            g.memory_budget.clone(),
        );
        reg.register_with_unit(
            "frame_pool_idle",
            "Idle read buffers kept for large requests (at most frame_pool_bytes with the lent-ahead ones)",
            Unit::Bytes,
            g.frame_pool_idle.clone(),
        );
        reg.register_with_unit(
            "frame_pool_lent_ahead",
            "Kept read buffers lent to requests their memory lease does not cover yet",
            Unit::Bytes,
            g.frame_pool_lent_ahead.clone(),
        );
        reg.register_with_unit(
            "response_memory_queued",
            "Encoded response bytes waiting to be written to clients",
            Unit::Bytes,
            g.responses_queued.clone(),
        );
        for (name, help, gauge) in [
            (
                "transactional_ids",
                "Transactional ids held by this gateway's transaction coordinator",
                &g.txn_ids,
            ),
            (
                "transactions_open",
                "Transactions open (Ongoing, PrepareCommit or PrepareAbort) at this gateway's coordinator",
                &g.txns_open,
            ),
            (
                "transaction_marker_jobs",
                "Ended transactions whose commit or abort markers are still being written",
                &g.txn_marker_jobs,
            ),
        ] {
            reg.register(name, help, gauge.clone());
        }
        for (name, help, counter) in [
            (
                "transaction_index_rebuilds",
                "Partitions whose transaction index was rebuilt from the log since start",
                &g.txn_index_rebuilds,
            ),
            (
                "transaction_index_rebuild_failures",
                "Transaction index rebuilds that failed (store error, over the byte bound, the view changed)",
                &g.txn_index_rebuild_failures,
            ),
            (
                "transaction_markers_written",
                "Commit and abort markers this gateway appended to the partitions it leads",
                &g.txn_markers_written,
            ),
        ] {
            reg.register(name, help, counter.clone());
        }
        reg.register_with_unit(
            "transaction_index_rebuild_read",
            "Bytes read from the store to rebuild transaction indexes since start",
            Unit::Bytes,
            g.txn_index_rebuild_bytes.clone(),
        );
        reg.register(
            "store_up",
            "1 when the store answered the scrape's ping, 0 otherwise",
            g.store_up.clone(),
        );
        reg.register(
            "scrape_partitions_truncated",
            "1 when this scrape left partitions out of the offset and lag series (more than the series bound, or out of time)",
            g.truncated.clone(),
        );
        g
    }
}

/// Reads the state behind the scrape-time metrics from the broker.
pub(crate) async fn refresh(metrics: &Metrics, broker: &Broker) {
    let g = &metrics.scrape;
    let budget = broker.request_memory.total();
    g.memory_budget
        .set(i64::try_from(budget).unwrap_or(i64::MAX));
    g.memory_in_use
        .set(i64::try_from(broker.request_memory.in_use()).unwrap_or(i64::MAX));
    g.responses_queued
        .set(i64::try_from(broker.response_memory.queued()).unwrap_or(i64::MAX));
    let (idle, lent_ahead) = broker.frame_pool.bytes();
    g.frame_pool_idle
        .set(i64::try_from(idle).unwrap_or(i64::MAX));
    g.frame_pool_lent_ahead
        .set(i64::try_from(lent_ahead).unwrap_or(i64::MAX));

    if let Ok(stats) = broker.groups.with(|c, _| c.stats()).await {
        g.groups.clear();
        g.members.clear();
        g.generation.clear();
        for state in [
            "Empty",
            "PreparingRebalance",
            "CompletingRebalance",
            "Stable",
            "Dead",
        ] {
            g.groups.get_or_create(&StateLabel { state }).set(0);
        }
        for group in &stats.groups {
            g.groups
                .get_or_create(&StateLabel {
                    state: group.state.as_str(),
                })
                .inc();
            let label = GroupLabel {
                group: group.group_id.clone(),
            };
            g.members
                .get_or_create(&label)
                .set(i64::try_from(group.members).unwrap_or(i64::MAX));
            g.generation
                .get_or_create(&label)
                .set(i64::from(group.generation));
        }
        g.rebalances
            .inner()
            .store(stats.rebalances, Ordering::Relaxed);
    }

    if let Ok((ids, open, jobs)) = broker
        .txns
        .with(|c, _| (c.id_count(), c.open_count(), c.job_count()))
        .await
    {
        for (gauge, value) in [
            (&g.txn_ids, ids),
            (&g.txns_open, open),
            (&g.txn_marker_jobs, jobs),
        ] {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    let txn = &broker.txn_partitions.stats;
    for (counter, value) in [
        (&g.txn_index_rebuilds, &txn.rebuilds),
        (&g.txn_index_rebuild_failures, &txn.rebuild_failures),
        (&g.txn_index_rebuild_bytes, &txn.rebuild_bytes),
        (&g.txn_markers_written, &txn.markers),
    ] {
        counter
            .inner()
            .store(value.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    let recovery = &broker.producers.stats;
    for (counter, value) in [
        (&g.producer_recoveries, &recovery.recoveries),
        (&g.producer_recovery_failures, &recovery.failures),
        (&g.producer_recovery_bytes, &recovery.bytes),
        (&g.producers_recovered, &recovery.producers),
        (&g.producer_recovery_reads_behind, &recovery.behind),
        (
            &g.producer_recoveries_behind_accepted,
            &recovery.behind_accepted,
        ),
    ] {
        counter
            .inner()
            .store(value.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    let deadline = tokio::time::Instant::now() + REFRESH_BUDGET;
    let truncated = tokio::time::timeout_at(deadline, offsets(metrics, broker))
        .await
        .unwrap_or(true);
    g.truncated.set(i64::from(truncated));
}

/// Partition offsets and consumer lag; `true` when series were left out.
async fn offsets(metrics: &Metrics, broker: &Broker) -> bool {
    let g = &metrics.scrape;
    let log = &broker.stores.log;
    let Ok(topics) = log.topics().await else {
        return true;
    };
    let live: Vec<(&str, u128)> = topics.iter().map(|t| (t.name.as_str(), t.id)).collect();
    metrics.partitions.retain(&live);
    let mut truncated = false;
    let mut ends: HashMap<(String, i32), i64> = HashMap::new();
    let mut starts = Vec::new();
    'topics: for t in &topics {
        for p in 0..t.partitions {
            if ends.len() >= MAX_PARTITION_SERIES {
                truncated = true;
                break 'topics;
            }
            match log.watermarks(&t.name, p).await {
                Ok(w) => {
                    ends.insert((t.name.clone(), p), w.high_watermark);
                    starts.push((t.name.clone(), p, w.log_start_offset));
                }
                Err(e) => {
                    debug!(topic = %t.name, partition = p, error = %e, "scrape: no watermarks")
                }
            }
        }
    }
    g.log_start.clear();
    g.log_end.clear();
    for (topic, partition, start) in starts {
        let label = PartitionLabels { topic, partition };
        g.log_start.get_or_create(&label).set(start);
        if let Some(end) = ends.get(&(label.topic.clone(), label.partition)) {
            g.log_end.get_or_create(&label).set(*end);
        }
    }

    let offsets = &broker.stores.offsets;
    let groups = offsets.groups().await.unwrap_or_default();
    let mut lag = Vec::new();
    'groups: for group in groups {
        let Ok(committed) = offsets.fetch_all(&group).await else {
            continue;
        };
        for (topic, partition, c) in committed {
            if lag.len() >= MAX_PARTITION_SERIES {
                truncated = true;
                break 'groups;
            }
            let end = ends.get(&(topic.clone(), partition)).copied();
            lag.push((group.clone(), topic, partition, c.offset, end));
        }
    }
    g.committed.clear();
    g.lag.clear();
    for (group, topic, partition, offset, end) in lag {
        let label = LagLabels {
            group,
            topic,
            partition,
        };
        g.committed.get_or_create(&label).set(offset);
        if let Some(end) = end {
            // A committed offset past the end (records deleted, or a topic recreated)
            // is no lag, not a negative one.
            g.lag.get_or_create(&label).set((end - offset).max(0));
        }
    }
    truncated
}

/// What the endpoint serves from.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) metrics: Option<Arc<Metrics>>,
    pub(crate) broker: Arc<Broker>,
    /// Whether the Kafka listener is accepting.
    pub(crate) listening: Arc<AtomicBool>,
    /// Scrapes run one at a time (they clear and refill the scrape-time families).
    pub(crate) scrape_lock: Arc<tokio::sync::Mutex<()>>,
    /// The bearer token `/metrics` requires, if any (`/health` and `/ready` tell
    /// nothing about tenants and stay open for probes).
    pub(crate) token: Option<Arc<MetricsToken>>,
}

/// A bearer token and the pause after each wrong one.
pub struct MetricsToken {
    token: Vec<u8>,
    /// Wrong tokens so far (a metric-free count for tests and logs).
    refused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsToken").finish_non_exhaustive()
    }
}

impl MetricsToken {
    /// A token `/metrics` will require (`Authorization: Bearer <token>`).
    pub fn new(token: &str) -> MetricsToken {
        MetricsToken {
            token: token.as_bytes().to_vec(),
            refused: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether `header` (the whole `Authorization` value) carries the token; compared
    /// without an early exit, so the time says nothing about how much of it matched.
    fn accepts(&self, header: Option<&[u8]>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        let mut diff = u8::from(given.len() != self.token.len());
        for (i, b) in self.token.iter().enumerate() {
            diff |= b ^ given.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }

    /// Wrong or missing tokens so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// How long a request with a wrong or missing token waits for its 401: with
/// [`MAX_CONNECTIONS`] at once, at most that many guesses per this long.
pub const TOKEN_FAILURE_DELAY: Duration = Duration::from_millis(500);

/// Longest a connection may stay open (one request, then closed).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the endpoint on `listener` until `stop` turns true: HTTP/1.1 by hyper, one
/// request per connection, the request head within [`HEAD_TIMEOUT`] and [`MAX_HEAD`]
/// bytes (hyper answers 431 past it), at most [`MAX_CONNECTIONS`] connections at once
/// (further ones are closed at once).
pub(crate) async fn serve(
    listener: TcpListener,
    endpoint: Endpoint,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (socket, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok((socket, peer)) => (socket, crate::session::canonical_peer(peer)),
                Err(e) => {
                    warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => return,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            debug!(%peer, "metrics endpoint: too many connections, closing");
            continue;
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(answer(&endpoint, &request, peer).await) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(socket), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics endpoint: connection failed"),
                Err(_) => debug!(%peer, "metrics endpoint: connection timed out"),
            }
            drop(permit);
        });
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A response with `body`, or only its head for `HEAD`.
fn reply(
    status: StatusCode,
    content_type: &str,
    body: String,
    head_only: bool,
) -> Response<Full<Bytes>> {
    let length = body.len();
    let body = if head_only {
        Bytes::new()
    } else {
        Bytes::from(body)
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, v);
    }
    headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(length));
    response
}

async fn answer(
    endpoint: &Endpoint,
    request: &Request<Incoming>,
    peer: std::net::SocketAddr,
) -> Response<Full<Bytes>> {
    let head_only = request.method() == Method::HEAD;
    if request.method() != Method::GET && !head_only {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD\n".into(),
            head_only,
        );
    }
    match request.uri().path() {
        "/health" => reply(StatusCode::OK, "text/plain", "ok\n".into(), head_only),
        "/ready" => {
            let (ok, why) = readiness(endpoint).await;
            let status = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            reply(status, "text/plain", format!("{why}\n"), head_only)
        }
        "/metrics" => {
            if let Some(token) = &endpoint.token {
                let given = request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .map(header::HeaderValue::as_bytes);
                if !token.accepts(given) {
                    let n = token.refused.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        warn!(%peer, refused = n, "metrics endpoint: wrong or missing bearer token");
                    }
                    tokio::time::sleep(TOKEN_FAILURE_DELAY).await;
                    let mut r = reply(
                        StatusCode::UNAUTHORIZED,
                        "text/plain",
                        "a bearer token is required\n".into(),
                        head_only,
                    );
                    r.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        header::HeaderValue::from_static("Bearer"),
                    );
                    return r;
                }
            }
            let Some(metrics) = &endpoint.metrics else {
                return reply(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    "metrics are off\n".into(),
                    head_only,
                );
            };
            let body = {
                let _one = endpoint.scrape_lock.lock().await;
                let up = ping(&endpoint.broker).await.is_ok();
                metrics.scrape.store_up.set(i64::from(up));
                refresh(metrics, &endpoint.broker).await;
                metrics.encode()
            };
            match body {
                Ok(text) => reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                    head_only,
                ),
                Err(_) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "encoding failed\n".into(),
                    head_only,
                ),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".into(),
            head_only,
        ),
    }
}

async fn ping(broker: &Broker) -> Result<(), String> {
    match tokio::time::timeout(PING_TIMEOUT, broker.stores.log.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "store {} unreachable: {e}",
            broker.stores.log.name()
        )),
        Err(_) => Err(format!(
            "store {} did not answer within {PING_TIMEOUT:?}",
            broker.stores.log.name()
        )),
    }
}

async fn readiness(endpoint: &Endpoint) -> (bool, String) {
    if !endpoint.listening.load(Ordering::Acquire) {
        return (
            false,
            "not ready: the Kafka listener is not accepting".into(),
        );
    }
    if !endpoint.broker.membership.acts_as_owner() {
        return (
            false,
            "not ready: not acting as an owner (joining, its view of the other gateways is stale, or its lease is gone)".into(),
        );
    }
    match ping(&endpoint.broker).await {
        Ok(()) => (true, "ready".into()),
        Err(why) => (false, format!("not ready: {why}")),
    }
}

#[cfg(test)]
mod token_tests {
    use super::MetricsToken;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let t = MetricsToken::new("s3cret-token");
        assert!(t.accepts(Some(b"Bearer s3cret-token")));
        for wrong in [
            &b"Bearer s3cret-toke"[..],
            b"Bearer s3cret-token!",
            b"Bearer S3cret-token",
            b"bearer s3cret-token",
            b"Basic s3cret-token",
            b"s3cret-token",
            b"Bearer ",
            b"",
        ] {
            assert!(
                !t.accepts(Some(wrong)),
                "{}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!t.accepts(None));
    }
}
