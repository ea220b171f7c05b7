//! The quota layer: measures each client against its quotas, answers with
//! `throttle_time_ms`, and mutes a connection that is over.
//!
//! For each request of a client with a quota ([`crate::quotas`] decides which applies):
//!
//! - Produce: the request's size counts against `producer_byte_rate` when it arrives.
//! - Fetch: the most it may return is cut to what the consumer quota allows over the
//!   window (the bound times all but one slot), then the response's record bytes count
//!   against `consumer_byte_rate`. A Fetch that finds the client over a quota (bytes or
//!   request time) is answered at once with no data and the throttle time, and its bytes
//!   are taken back, as Kafka does since KIP-219: the data is fetched again after the pause.
//! - Every request: the time from this layer seeing it to its response being ready
//!   counts against `request_percentage` (100 = one second per second). A Fetch's
//!   long-poll wait is not handling work, so a Fetch is charged only the time beyond its
//!   `max_wait_ms`; a Fetch that returns before its wait is over costs nothing here.
//!
//! The largest throttle time of the request goes into the response's `throttle_time_ms`
//! (in every version that has the field; older versions are answered without it), and
//! the connection is muted for that long: its next request waits in this layer until the
//! time has passed, so no further request of the connection is processed meanwhile. The
//! response itself goes out at once, so a client that honours the field (KIP-219) pauses
//! on its own and never notices the mute.
//!
//! Each connection also keeps its own rates, measured against the quota of the client id
//! it uses: changing the client id on a connection does not escape the quota (see
//! [`crate::quotas`]). Connection state lives here, keyed by the connection id, from the
//! connection's first quota-bound request to its close.

use super::{Layer, Request, RequestInfo, Verdict};
use crate::quotas::{Bounds, Quotas, Rates, Usage};
use crate::session::Session;
use async_trait::async_trait;
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::debug;

/// Measures clients against their quotas.
#[derive(Debug)]
pub(crate) struct QuotaLayer {
    quotas: Arc<Quotas>,
    connections: Mutex<HashMap<u64, Connection>>,
    /// Whether any connection ever had quota state: until then requests skip the
    /// connection table (a gateway without quotas pays no lock per request).
    used: AtomicBool,
}

/// One connection's quota state.
#[derive(Debug, Default)]
struct Connection {
    /// No request is processed before this.
    muted_until: Option<Instant>,
    /// The connection's own usage.
    rates: Option<Rates>,
}

/// What the layer carries from a request to its response.
#[derive(Debug, Clone)]
struct Note {
    start: Instant,
    client: Arc<str>,
    bounds: Bounds,
    /// Throttle time found when the request arrived (Produce bytes).
    throttle_ms: u64,
    /// A Fetch's `max_wait_ms`.
    fetch_wait: Duration,
}

impl QuotaLayer {
    pub(crate) fn new(quotas: Arc<Quotas>) -> QuotaLayer {
        QuotaLayer {
            quotas,
            connections: Mutex::new(HashMap::new()),
            used: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Connection>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table, for adding a connection's state.
    fn lock_for_insert(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Connection>> {
        self.used.store(true, Ordering::Relaxed);
        self.lock()
    }

    /// Records `value` for the client and the connection; the larger throttle time.
    fn record(
        &self,
        session: &Session,
        client: &str,
        now: u64,
        usage: Usage,
        value: f64,
        bound: Option<f64>,
    ) -> u64 {
        let by_client = self.quotas.record(client, now, usage, value, bound);
        let window = self.quotas.window();
        let mut conns = self.lock_for_insert();
        let conn = conns.entry(session.id).or_default();
        let rates = conn.rates.get_or_insert_with(|| Rates::new(window, now));
        by_client.max(rates.record(window, now, usage, value, bound))
    }

    fn unrecord(&self, session: &Session, client: &str, now: u64, usage: Usage, value: f64) {
        self.quotas.unrecord(client, now, usage, value);
        let window = self.quotas.window();
        if let Some(rates) = self
            .lock()
            .get_mut(&session.id)
            .and_then(|c| c.rates.as_mut())
        {
            rates.unrecord(window, now, usage, value);
        }
    }
}

#[async_trait]
impl Layer for QuotaLayer {
    fn name(&self) -> &'static str {
        "quotas"
    }

    async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
        let muted = if self.used.load(Ordering::Relaxed) {
            self.lock()
                .get_mut(&session.id)
                .and_then(|c| c.muted_until.take())
        } else {
            None
        };
        if let Some(until) = muted {
            tokio::time::sleep_until(until.into()).await;
        }
        if !self.quotas.active() {
            return Verdict::Pass;
        }
        let client = session.client_id.clone();
        let bounds = self.quotas.bounds(&client);
        if !bounds.any() {
            return Verdict::Pass;
        }
        let start = Instant::now();
        let now = self.quotas.now_ms(start);
        let mut throttle_ms = 0;
        let mut fetch_wait = Duration::ZERO;
        match &mut request.body {
            RequestBody::Produce(_) => {
                if let Some(bound) = bounds.produce {
                    throttle_ms = self.record(
                        session,
                        &client,
                        now,
                        Usage::Produce,
                        request.frame_len as f64,
                        Some(bound),
                    );
                }
            }
            RequestBody::Fetch(fetch) => {
                fetch_wait = Duration::from_millis(u64::try_from(fetch.max_wait_ms).unwrap_or(0));
                if let Some(bound) = bounds.fetch {
                    let w = self.quotas.window();
                    let most = bound * (w.samples - 1) as f64 * w.slot_ms as f64 / 1000.0;
                    let most = most.clamp(1.0, i32::MAX as f64) as i32;
                    if fetch.max_bytes > most || fetch.max_bytes <= 0 {
                        fetch.max_bytes = most;
                    }
                }
            }
            _ => {}
        }
        request.notes.put(Note {
            start,
            client,
            bounds,
            throttle_ms,
            fetch_wait,
        });
        Verdict::Pass
    }

    fn on_reply(&self, session: &Session, request: &RequestInfo, body: &mut ResponseBody) {
        let Some(note) = request.notes.get::<Note>() else {
            return;
        };
        let end = Instant::now();
        let now = self.quotas.now_ms(end);
        let mut throttle = note.throttle_ms;
        if let Some(bound) = note.bounds.request {
            let mut busy = end.saturating_duration_since(note.start);
            if matches!(body, ResponseBody::Fetch(_)) {
                busy = busy.saturating_sub(note.fetch_wait);
            }
            // Percent-seconds: a second of handling is 100.
            let value = busy.as_micros() as f64 / 10_000.0;
            throttle = throttle.max(self.record(
                session,
                &note.client,
                now,
                Usage::Request,
                value,
                Some(bound),
            ));
        }
        if let ResponseBody::Fetch(fetch) = body {
            let bytes = fetch_bytes(fetch) as f64;
            if let Some(bound) = note.bounds.fetch {
                let by_bytes =
                    self.record(session, &note.client, now, Usage::Fetch, bytes, Some(bound));
                throttle = throttle.max(by_bytes);
            }
            if throttle > 0 {
                // Over any quota, a Fetch returns no data (as Kafka does): the data does
                // not count, and is fetched again after the pause.
                if note.bounds.fetch.is_some() {
                    self.unrecord(session, &note.client, now, Usage::Fetch, bytes);
                }
                *fetch = FetchResponse {
                    error_code: ErrorCode::NONE.code(),
                    session_id: fetch.session_id,
                    ..FetchResponse::default()
                };
            }
        }
        if throttle == 0 {
            return;
        }
        let ms = i32::try_from(throttle).unwrap_or(i32::MAX);
        set_throttle_time(body, ms);
        debug!(
            client_id = %note.client,
            throttle_ms = throttle,
            "client over its quota, throttled"
        );
        let until = end + Duration::from_millis(throttle);
        let mut conns = self.lock_for_insert();
        let conn = conns.entry(session.id).or_default();
        conn.muted_until = Some(conn.muted_until.map_or(until, |m| m.max(until)));
    }

    fn on_disconnect(&self, session: &Session) {
        if self.used.load(Ordering::Relaxed) {
            self.lock().remove(&session.id);
        }
    }
}

/// Record bytes in a Fetch response.
fn fetch_bytes(fetch: &FetchResponse) -> usize {
    fetch
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum()
}

/// Raises the response's `throttle_time_ms` to at least `ms`, for every API whose
/// response has the field. A version without the field does not encode it.
pub(crate) fn set_throttle_time(body: &mut ResponseBody, ms: i32) {
    macro_rules! raise {
        ($($variant:ident),* $(,)?) => {
            match body {
                $(ResponseBody::$variant(b) => b.throttle_time_ms = b.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    raise!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeCluster,
        DescribeProducers,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeTopicPartitions,
    );
}

/// Throttle time of a response, for tests.
#[cfg(test)]
pub(crate) fn throttle_time(body: &ResponseBody) -> Option<i32> {
    match body {
        ResponseBody::Produce(b) => Some(b.throttle_time_ms),
        ResponseBody::Fetch(b) => Some(b.throttle_time_ms),
        ResponseBody::Metadata(b) => Some(b.throttle_time_ms),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Notes;
    use crate::quotas::{MemoryQuotaStore, QuotaConfig};
    use crate::session::Listener;
    use kafka_protocol::ApiKey;
    use kafka_protocol::messages::metadata_response::MetadataResponse;
    use kafka_protocol::messages::produce_request::ProduceRequest;
    use kafka_protocol::messages::produce_response::ProduceResponse;

    fn layer(config: QuotaConfig) -> QuotaLayer {
        QuotaLayer::new(Arc::new(
            Quotas::new(config, Arc::new(MemoryQuotaStore::default())).unwrap(),
        ))
    }

    fn produce(client: &str, frame_len: usize) -> Request {
        Request {
            api: ApiKey::Produce,
            version: 9,
            correlation_id: 1,
            client_id: Some(client.into()),
            body: ProduceRequest::default().into(),
            frame_len,
            received: Instant::now(),
            notes: Notes::default(),
        }
    }

    fn session(id: u64, client: &str) -> Session {
        let mut s = Session::new(id, Listener::plaintext(), "127.0.0.1:9".parse().unwrap());
        s.client_id = Arc::from(client);
        s
    }

    #[tokio::test]
    async fn a_producer_over_its_rate_gets_a_throttle_time_and_its_connection_is_muted() {
        let l = layer(QuotaConfig {
            producer_byte_rate: 1000,
            ..QuotaConfig::default()
        });
        let mut s = session(1, "p");
        let mut r = produce("p", 30_000);
        assert!(matches!(l.on_request(&mut s, &mut r).await, Verdict::Pass));
        let (info, _) = r.split();
        let mut body: ResponseBody = ProduceResponse::default().into();
        l.on_reply(&s, &info, &mut body);
        let t = throttle_time(&body).unwrap();
        assert!(t > 0, "throttle {t}");
        assert!(
            l.lock()
                .get(&1)
                .and_then(|c| c.muted_until)
                .is_some_and(|u| u > Instant::now())
        );
        // Another connection of another client is not muted.
        assert!(l.lock().get(&2).is_none());
        l.on_disconnect(&s);
        assert!(l.lock().is_empty());
    }

    #[tokio::test]
    async fn a_client_without_a_quota_is_left_alone() {
        let l = layer(QuotaConfig::default());
        let mut s = session(1, "p");
        let mut r = produce("p", 30_000_000);
        l.on_request(&mut s, &mut r).await;
        let (info, _) = r.split();
        let mut body: ResponseBody = ProduceResponse::default().into();
        l.on_reply(&s, &info, &mut body);
        assert_eq!(throttle_time(&body), Some(0));
        assert!(l.lock().is_empty());
    }

    #[tokio::test]
    async fn changing_client_ids_on_one_connection_does_not_escape_the_quota() {
        let l = layer(QuotaConfig {
            producer_byte_rate: 1000,
            ..QuotaConfig::default()
        });
        let mut throttled = false;
        for i in 0..20 {
            let id = format!("rot-{i}");
            let mut s = session(7, &id);
            let mut r = produce(&id, 1_500);
            // Skip the mute wait: only the measured throttle matters here.
            if let Some(c) = l.lock().get_mut(&7) {
                c.muted_until = None;
            }
            l.on_request(&mut s, &mut r).await;
            let (info, _) = r.split();
            let mut body: ResponseBody = ProduceResponse::default().into();
            l.on_reply(&s, &info, &mut body);
            throttled |= throttle_time(&body).unwrap() > 0;
        }
        // Each id alone sent 1500 B (150 B/s over the window): only the connection's
        // own rate can catch this.
        assert!(throttled);
    }

    #[tokio::test]
    async fn a_fetch_over_the_consumer_quota_is_emptied_and_its_bytes_not_counted() {
        use kafka_protocol::messages::fetch_request::FetchRequest;
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let l = layer(QuotaConfig {
            consumer_byte_rate: 1000,
            ..QuotaConfig::default()
        });
        let mut s = session(3, "c");
        let mut r = Request {
            api: ApiKey::Fetch,
            version: 12,
            correlation_id: 1,
            client_id: Some("c".into()),
            body: FetchRequest {
                max_bytes: i32::MAX,
                ..FetchRequest::default()
            }
            .into(),
            frame_len: 100,
            received: Instant::now(),
            notes: Notes::default(),
        };
        l.on_request(&mut s, &mut r).await;
        // max_bytes cut to the quota over all but one slot: 1000 B/s x 10 s.
        let RequestBody::Fetch(f) = &r.body else {
            unreachable!()
        };
        assert_eq!(f.max_bytes, 10_000);
        let (info, _) = r.split();
        let mut body: ResponseBody = FetchResponse {
            responses: vec![FetchableTopicResponse {
                partitions: vec![PartitionData {
                    records: Some(bytes::Bytes::from(vec![0u8; 50_000]).into()),
                    ..PartitionData::default()
                }],
                ..FetchableTopicResponse::default()
            }],
            ..FetchResponse::default()
        }
        .into();
        l.on_reply(&s, &info, &mut body);
        let ResponseBody::Fetch(f) = &body else {
            unreachable!()
        };
        assert!(f.throttle_time_ms > 0);
        assert!(f.responses.is_empty());
        // The bytes not sent were taken back: a small amount is within the quota.
        let now = l.quotas.now_ms(Instant::now());
        assert_eq!(
            l.quotas.record("c", now, Usage::Fetch, 10.0, Some(1000.0)),
            0
        );
    }

    #[test]
    fn the_throttle_time_is_raised_never_lowered() {
        let mut body: ResponseBody = MetadataResponse {
            throttle_time_ms: 50,
            ..MetadataResponse::default()
        }
        .into();
        set_throttle_time(&mut body, 10);
        assert_eq!(throttle_time(&body), Some(50));
        set_throttle_time(&mut body, 80);
        assert_eq!(throttle_time(&body), Some(80));
    }
}
