//! Prometheus metrics: what the gateway counts, and the layer that counts it.
//!
//! [`Metrics`] holds a `prometheus-client` registry. The request-path metrics are updated
//! by [`MetricsLayer`], a pipeline layer, and by the connection accept loop; the
//! state-path metrics (partition offsets, consumer lag, groups, request memory, process
//! CPU and memory) are read from the broker when `/metrics` is scraped
//! ([`http`]). Every metric is described in `docs/observability.md`.
//!
//! Costs on the request path: fixed label sets (API and version) are looked up in small
//! maps; per-partition counters are atomics behind a read lock keyed by topic name, with
//! no allocation once a partition has been seen.

mod cleaner;
pub mod http;
mod partitions;
mod process;

use crate::pipeline::{Completion, Layer, Request, RequestInfo, Verdict};
use crate::session::Session;
use async_trait::async_trait;
pub use cleaner::{LogCleanerCollector, MAX_DIRTY_RATIO_PARTITIONS};
use kafka_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
pub use partitions::{PartitionCounters, TopicRef};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;

/// `api` and `version` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// Kafka's API name, e.g. `Produce`.
    pub api: &'static str,
    /// The request's version.
    pub version: i16,
}

/// `api`, `version` and `error` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Kafka's API name.
    pub api: &'static str,
    /// The request's version.
    pub version: i16,
    /// Kafka's name for the error code (`UNKNOWN_<code>` for codes without one).
    pub error: &'static str,
}

/// `api` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabel {
    /// Kafka's API name.
    pub api: &'static str,
}

/// `reason` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why.
    pub reason: &'static str,
}

/// `listener` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    /// The listener's name.
    pub listener: String,
}

/// `listener`, `mechanism` and `outcome` labels of SASL authentications.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SaslLabels {
    /// The listener's name.
    pub listener: String,
    /// The SASL mechanism (`PLAIN`, `SCRAM-SHA-256`, ...).
    pub mechanism: &'static str,
    /// `success` or `failure`.
    pub outcome: &'static str,
}

/// `kind` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// What kind.
    pub kind: &'static str,
}

/// Every metric of the gateway, and the registry they are encoded from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub(crate) requests: Family<ApiLabels, Counter>,
    pub(crate) errors: Family<ErrorLabels, Counter>,
    pub(crate) latency: Family<ApiLabel, Histogram>,
    pub(crate) rejected: Family<ReasonLabel, Counter>,
    pub(crate) bytes_in: Counter,
    pub(crate) bytes_out: Counter,
    pub(crate) connections_open: Family<ListenerLabel, Gauge>,
    pub(crate) connections_accepted: Family<ListenerLabel, Counter>,
    pub(crate) connections_refused: Family<ReasonLabel, Counter>,
    pub(crate) sasl_authentications: Family<SaslLabels, Counter>,
    pub(crate) sasl_failures: Family<KindLabel, Counter>,
    pub(crate) sasl_reauthentications: Family<ListenerLabel, Counter>,
    pub(crate) sasl_expired_closes: Family<ListenerLabel, Counter>,
    pub(crate) partitions: Arc<PartitionCounters>,
    pub(crate) scrape: http::ScrapeGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every gateway metric, prefixed `kafka_gateway_`, and the process
    /// metrics (`process_*`).
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        let reg = root.sub_registry_with_prefix("kafka_gateway");
        let requests = Family::<ApiLabels, Counter>::default();
        reg.register(
            "requests",
            "Requests handled, by API and version",
            requests.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        reg.register(
            "response_errors",
            "Error codes other than NONE in responses (each topic, partition or group entry counts once), by API, version and error",
            errors.clone(),
        );
        // 100 µs to 26 s: produce round trips at the low end, long-poll fetches and
        // group joins at the high end.
        let latency = Family::<ApiLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0001, 2.0, 19))) as fn() -> Histogram,
        );
        reg.register_with_unit(
            "request_duration",
            "Time from a request's last byte read to its response handed to the writer, by API",
            Unit::Seconds,
            latency.clone(),
        );
        let rejected = Family::<ReasonLabel, Counter>::default();
        reg.register(
            "requests_rejected",
            "Frames refused before reaching a handler (unsupported API or version, malformed), by reason",
            rejected.clone(),
        );
        let bytes_in = Counter::default();
        reg.register_with_unit(
            "received",
            "Request bytes received, size prefixes included",
            Unit::Bytes,
            bytes_in.clone(),
        );
        let bytes_out = Counter::default();
        reg.register_with_unit(
            "sent",
            "Response bytes handed to connections' writers",
            Unit::Bytes,
            bytes_out.clone(),
        );
        let connections_open = Family::<ListenerLabel, Gauge>::default();
        reg.register(
            "connections_open",
            "Open client connections, by listener",
            connections_open.clone(),
        );
        let connections_accepted = Family::<ListenerLabel, Counter>::default();
        reg.register(
            "connections_accepted",
            "Client connections accepted, by listener",
            connections_accepted.clone(),
        );
        let connections_refused = Family::<ReasonLabel, Counter>::default();
        reg.register(
            "connections_refused",
            "Client connections closed right after accept, by reason",
            connections_refused.clone(),
        );
        let sasl_authentications = Family::<SaslLabels, Counter>::default();
        reg.register(
            "sasl_authentications",
            "SASL authentications and re-authentications that ended, by listener, mechanism and outcome",
            sasl_authentications.clone(),
        );
        let sasl_failures = Family::<KindLabel, Counter>::default();
        reg.register(
            "sasl_authentication_failures",
            "Rejected SASL authentications, by kind (bad_credentials, malformed, too_large, unavailable, principal_changed, timeout)",
            sasl_failures.clone(),
        );
        let sasl_reauthentications = Family::<ListenerLabel, Counter>::default();
        reg.register(
            "sasl_reauthentications",
            "Successful re-authentications of authenticated sessions (KIP-368), by listener",
            sasl_reauthentications.clone(),
        );
        let sasl_expired_closes = Family::<ListenerLabel, Counter>::default();
        reg.register(
            "sasl_expired_session_closes",
            "Connections closed because a request came after the session's lifetime without re-authentication, by listener",
            sasl_expired_closes.clone(),
        );
        let partitions = Arc::new(PartitionCounters::default());
        reg.register_collector(Box::new(partitions.clone()));
        let scrape = http::ScrapeGauges::register(reg);
        root.register_collector(Box::new(process::ProcessCollector));
        Metrics {
            registry: root,
            requests,
            errors,
            latency,
            rejected,
            bytes_in,
            bytes_out,
            connections_open,
            connections_accepted,
            connections_refused,
            sasl_authentications,
            sasl_failures,
            sasl_reauthentications,
            sasl_expired_closes,
            partitions,
            scrape,
        }
    }

    /// Adds the embedded store's log cleaner metrics (`kafka_gateway_log_cleaner_*`).
    pub fn register_log_cleaner(&mut self, store: &Arc<kafka_store::memory::MemoryStore>) {
        self.registry
            .sub_registry_with_prefix("kafka_gateway")
            .register_collector(Box::new(LogCleanerCollector::new(store)));
    }

    /// The registry, for embedders that add metrics of their own (the Iggy bridge's round
    /// trips, for example) before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The registry in Prometheus' text format (OpenMetrics 1.0).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// A response's topic: by name, or by id when the version carries ids only.
fn topic_ref(name: &str, id: kafka_protocol::Uuid) -> TopicRef<'_> {
    if name.is_empty() {
        TopicRef::Id(id.as_u128())
    } else {
        TopicRef::Name(name)
    }
}

/// Counts requests, errors, latency, bytes and per-partition traffic.
#[derive(Debug)]
pub struct MetricsLayer {
    metrics: Arc<Metrics>,
}

impl MetricsLayer {
    /// A layer recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> MetricsLayer {
        MetricsLayer { metrics }
    }
}

/// Per-partition sizes of a Produce request, by position in the request, for its
/// response.
#[derive(Debug)]
struct ProduceSizes(Vec<Vec<(i32, u64, u64)>>);

#[async_trait]
impl Layer for MetricsLayer {
    fn name(&self) -> &'static str {
        "metrics"
    }

    fn on_connect(&self, session: &Session) {
        let l = ListenerLabel {
            listener: session.listener.name.to_string(),
        };
        self.metrics.connections_accepted.get_or_create(&l).inc();
        self.metrics.connections_open.get_or_create(&l).inc();
    }

    fn on_disconnect(&self, session: &Session) {
        let l = ListenerLabel {
            listener: session.listener.name.to_string(),
        };
        self.metrics.connections_open.get_or_create(&l).dec();
    }

    fn on_rejected(&self, _: &Session, _: Option<ApiKey>, _: i16, reason: &'static str) {
        self.metrics
            .rejected
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    async fn on_request(&self, _session: &mut Session, request: &mut Request) -> Verdict {
        self.metrics.bytes_in.inc_by(request.frame_len as u64);
        if let RequestBody::Produce(p) = &request.body {
            let sizes = p
                .topic_data
                .iter()
                .map(|t| {
                    t.partition_data
                        .iter()
                        .map(|pd| {
                            let (records, bytes) = pd
                                .records
                                .as_deref()
                                .map(partitions::batch_totals)
                                .unwrap_or((0, 0));
                            (pd.index, records, bytes)
                        })
                        .collect()
                })
                .collect();
            request.notes.put(ProduceSizes(sizes));
        }
        Verdict::Pass
    }

    fn on_response(&self, _: &Session, request: &RequestInfo, done: &Completion<'_>) {
        let m = &self.metrics;
        let api = request.api.name();
        m.requests
            .get_or_create(&ApiLabels {
                api,
                version: request.version,
            })
            .inc();
        m.bytes_out.inc_by(done.sent_bytes as u64);
        m.latency
            .get_or_create(&ApiLabel { api })
            .observe(request.received.elapsed().as_secs_f64());
        let Some(body) = done.body else { return };
        body.for_each_error_code(request.version, &mut |code| {
            if code != 0 {
                m.errors
                    .get_or_create(&ErrorLabels {
                        api,
                        version: request.version,
                        error: ErrorCode(code).name().unwrap_or("UNKNOWN_CODE"),
                    })
                    .inc();
            }
        });
        match body {
            ResponseBody::Produce(resp) => {
                let Some(ProduceSizes(sizes)) = request.notes.get::<ProduceSizes>() else {
                    return;
                };
                for (topic, sizes) in resp.responses.iter().zip(sizes) {
                    for (p, (index, records, bytes)) in topic.partition_responses.iter().zip(sizes)
                    {
                        if p.error_code == 0 && p.index == *index {
                            m.partitions.produced(
                                topic_ref(&topic.name, topic.topic_id),
                                p.index,
                                *records,
                                *bytes,
                            );
                        }
                    }
                }
            }
            ResponseBody::Fetch(resp) => {
                for topic in &resp.responses {
                    for p in &topic.partitions {
                        if let Some(records) = p.records.as_ref()
                            && !records.is_empty()
                        {
                            // The gateway's segments are whole batches each.
                            let (n, bytes) = records
                                .segments()
                                .iter()
                                .map(|s| partitions::batch_totals(s))
                                .fold((0, 0), |(n, b), (sn, sb)| (n + sn, b + sb));
                            m.partitions.fetched(
                                topic_ref(&topic.topic, topic.topic_id),
                                p.partition_index,
                                n,
                                bytes,
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{Notes, Request};
    use crate::session::Listener;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
    };
    use kafka_records::{BatchOptions, NewRecord, encode_batch};
    use std::time::Instant;

    fn batch(n: usize) -> Bytes {
        let records: Vec<NewRecord> = (0..n)
            .map(|_| NewRecord {
                timestamp: 1,
                key: None,
                value: Some(Bytes::from_static(b"0123456789")),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        out.freeze()
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[tokio::test]
    async fn counts_requests_errors_bytes_and_only_acknowledged_partitions() {
        let metrics = Arc::new(Metrics::new());
        let layer = MetricsLayer::new(metrics.clone());
        let mut session = Session::new(1, Listener::plaintext(), "127.0.0.1:9".parse().unwrap());
        layer.on_connect(&session);
        let (b0, b1) = (batch(3), batch(2));
        let mut request = Request {
            api: ApiKey::Produce,
            version: 9,
            correlation_id: 1,
            client_id: None,
            body: ProduceRequest {
                topic_data: vec![TopicProduceData {
                    name: "t".into(),
                    partition_data: vec![
                        PartitionProduceData {
                            index: 0,
                            records: Some(b0.clone()),
                            ..Default::default()
                        },
                        PartitionProduceData {
                            index: 1,
                            records: Some(b1),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            frame_len: 500,
            received: Instant::now(),
            notes: Notes::default(),
        };
        assert!(matches!(
            layer.on_request(&mut session, &mut request).await,
            Verdict::Pass
        ));
        let (info, _) = request.split();
        // Partition 0 appended, partition 1 refused.
        let response: ResponseBody = ProduceResponse {
            responses: vec![TopicProduceResponse {
                name: "t".into(),
                partition_responses: vec![
                    PartitionProduceResponse {
                        index: 0,
                        ..Default::default()
                    },
                    PartitionProduceResponse {
                        index: 1,
                        error_code: ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        }
        .into();
        layer.on_response(
            &session,
            &info,
            &Completion {
                body: Some(&response),
                sent_bytes: 80,
                closed: false,
                by_layer: None,
            },
        );
        layer.on_disconnect(&session);
        let text = metrics.encode().unwrap();
        let get = |s: &str| sample(&text, s).unwrap_or_else(|| panic!("no {s} in\n{text}"));
        assert_eq!(
            get("kafka_gateway_requests_total{api=\"Produce\",version=\"9\"}"),
            1.0
        );
        assert_eq!(
            get(
                "kafka_gateway_response_errors_total{api=\"Produce\",version=\"9\",error=\"NOT_LEADER_OR_FOLLOWER\"}"
            ),
            1.0
        );
        assert_eq!(get("kafka_gateway_received_bytes_total"), 500.0);
        assert_eq!(get("kafka_gateway_sent_bytes_total"), 80.0);
        assert_eq!(
            get("kafka_gateway_request_duration_seconds_count{api=\"Produce\"}"),
            1.0
        );
        assert_eq!(
            get("kafka_gateway_partition_produced_records_total{topic=\"t\",partition=\"0\"}"),
            3.0
        );
        assert_eq!(
            get("kafka_gateway_partition_produced_bytes_total{topic=\"t\",partition=\"0\"}"),
            b0.len() as f64
        );
        assert_eq!(
            sample(
                &text,
                "kafka_gateway_partition_produced_records_total{topic=\"t\",partition=\"1\"}"
            ),
            None,
            "a refused partition is not counted"
        );
        assert_eq!(
            get("kafka_gateway_connections_accepted_total{listener=\"PLAINTEXT\"}"),
            1.0
        );
        assert_eq!(
            get("kafka_gateway_connections_open{listener=\"PLAINTEXT\"}"),
            0.0
        );
    }

    #[test]
    fn rejected_frames_are_counted_by_reason() {
        let metrics = Arc::new(Metrics::new());
        let layer = MetricsLayer::new(metrics.clone());
        let session = Session::new(1, Listener::plaintext(), "127.0.0.1:9".parse().unwrap());
        layer.on_rejected(&session, None, 3, "unsupported API");
        layer.on_rejected(&session, None, 3, "unsupported API");
        let text = metrics.encode().unwrap();
        assert_eq!(
            sample(
                &text,
                "kafka_gateway_requests_rejected_total{reason=\"unsupported API\"}"
            ),
            Some(2.0)
        );
    }

    #[test]
    fn producer_state_recoveries_are_exported_under_their_documented_names() {
        let metrics = Metrics::new();
        let text = metrics.encode().unwrap();
        let docs = include_str!("../../../../docs/observability.md");
        for name in [
            "kafka_gateway_producer_state_recoveries_total",
            "kafka_gateway_producer_state_recovery_failures_total",
            "kafka_gateway_producer_state_recovery_read_bytes_total",
            "kafka_gateway_producer_states_recovered_total",
            "kafka_gateway_producer_state_recovery_reads_behind_total",
            "kafka_gateway_producer_state_recoveries_behind_accepted_total",
        ] {
            assert_eq!(sample(&text, name), Some(0.0), "{name} in {text}");
            assert!(docs.contains(&format!("`{name}`")), "{name} not documented");
        }
    }
}
