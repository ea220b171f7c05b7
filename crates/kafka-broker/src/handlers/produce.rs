//! Produce (key 0): validate record batches and append them.
//!
//! Every partition's `records` is checked before anything is stored, as Kafka's broker
//! does: exactly one record batch (from v3), magic 2, CRC-32C, a codec the negotiated
//! version allows (zstd from v7), the decompressed size and record count within limits,
//! each record well-formed with its offset delta equal to its index, the batch within
//! the topic's `max.message.bytes`, and then the topic's own rules, record by record as
//! Kafka's log validator applies them ([`check_records`]): a compacted topic refuses
//! keyless records (`INVALID_RECORD`), a CreateTime topic refuses timestamps outside
//! `message.timestamp.before.max.ms` / `after.max.ms` of the broker's clock
//! (`INVALID_TIMESTAMP`; the topic's value when it names one, else the broker's
//! `limits.message_timestamp_*`), each failing record listed in `record_errors` and
//! nothing of the batch stored. What passes is stored as the topic says
//! ([`ValidBatch::restamped`]): encoded again with the topic's `compression.type`
//! unless that is `producer` or the producer's codec already, and under
//! `message.timestamp.type=LogAppendTime` stamped with the broker's clock (the
//! LogAppendTime bit, every record's timestamp and `maxTimestamp`), which the response
//! returns as `log_append_time_ms`. `max.message.bytes` is checked again on the batch
//! as stored, as Kafka does after recompressing. Errors
//! are per partition, so one bad partition does not fail the others. A partition named
//! more than once in a request gets `INVALID_REQUEST` for every copy and nothing of it
//! is stored (Kafka keeps the last copy silently; a client never sends two, and
//! choosing one would answer the others with an offset they do not have). Versions 0-2
//! (legacy message sets) are answered `UNSUPPORTED_VERSION` per partition. With acks=0 no
//! response is sent.
//!
//! Transactions: a control batch from a client is `INVALID_RECORD` (only partition
//! leaders write markers), and so is a transactional batch without a producer id. A
//! request holding a transactional batch but no transactional id is answered
//! `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` for every partition, as Kafka does. The first
//! transactional batch of a producer in a partition where it has no transaction open is
//! verified with the transaction coordinator first (KIP-890 part 1, [`verify_all`]): a
//! partition not added to the transaction is `TRANSACTION_ABORTABLE` from Produce v11,
//! `INVALID_TXN_STATE` below; a coordinator that is busy, loading or elsewhere makes it
//! `NOT_ENOUGH_REPLICAS` (retriable); a fenced producer `INVALID_PRODUCER_EPOCH`. Before
//! the first transactional batch of a topic the store's transactional flag is set. Under
//! the producer's lock on the partition the transaction index is found current (or
//! rebuilt, under the partition's exclusive lock) and the batch counted
//! ([`crate::txns::partitions`]) before it is handed to the store; sequence checks are
//! the idempotent ones, against the producer's batches in flight too.
//!
//! A partition another gateway leads is answered `NOT_LEADER_OR_FOLLOWER` before its
//! records are looked at; from v10 the answer names that gateway in `current_leader`
//! (leader epoch 0, as Metadata says) and its address for the request's listener in
//! `node_endpoints` (KIP-951), so the client can resend there at once.
//!
//! Decompressing and walking the records is the expensive part: a few bytes of zstd can
//! inflate to the batch limit, and compressing them again for the topic costs more. A
//! request with compressed records, for a topic that encodes its batches again
//! (LogAppendTime, or a `compression.type` other than `producer` and `uncompressed`), or
//! with more uncompressed bytes than `inline_validation_bytes`, is checked on the
//! validation pool
//! ([`crate::cpu`]), never on the connection's worker, and all its batches together may
//! inflate to at most `max_decompressed_request_bytes` (counting what a refused batch
//! was allowed to inflate to): past that, partitions get `MESSAGE_TOO_LARGE` without
//! being decompressed.
//!
//! A request goes through three steps, so that the connection can start the next Produce
//! while the store is still confirming this one: [`prepare`] (topic lookups and batch
//! validation; nothing stored), [`submit`] (idempotence checks, then every partition's
//! batch handed to the store with `LogStore::submit`, in request order, which fixes
//! its place) and [`complete`] (wait for the store, record idempotent producers' batches,
//! build the response). An idempotent batch is checked and handed to the store under
//! its producer's lock on the partition, and then put in flight in the producer state
//! ([`crate::producers::Producers::begin`]): the producer's next batch, on this
//! connection or another, is checked against it, so the producer's requests overlap as
//! anyone's do, and the same batch sent twice waits for the first one's outcome instead
//! of landing twice. The partitions' own locks are held shared until the request's
//! appends are settled, so other producers' batches on the same partitions are checked
//! and appended alongside, and no recovery reads the log while an append is in flight.
//! Transactional batches go the same way (a transaction's later batch, confirmed before
//! the one that opened it, leaves the transaction's pending bound in place:
//! [`crate::txns::partitions::TxnPartitions::appended`]). A partition whose producer
//! state or transaction index must be recovered first takes them exclusively, and such
//! a request is confirmed and recorded before the connection's next one is read. Under
//! that lock, an
//! idempotent batch's partition is first confirmed as led by this gateway in the current
//! view (the view may have changed since [`prepare`]) and, the first time since this
//! gateway began leading it, its producer state is rebuilt from the log
//! ([`crate::producers`]).

use super::metadata::{hinted_endpoints, leader_hint};
use super::{Ctx, Reply, Step, bs};
use crate::broker::now_ms;
use crate::config::Limits;
use crate::producers::{BatchId, InFlight, Ticket, Verdict};
use crate::store::{
    AppendOutcome, CompressionType, LogStore, MessageTimestampType, PendingAppend, SinkFor,
    TopicConfig, TopicInfo, ValidBatch, check_batches_with,
};
use crate::txns::TxnRouter;
use crate::txns::partitions::{Guard, TxnTicket};
use bytes::Bytes;
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::{ErrorCode, Uuid};
use kafka_records::{Compression, DecodeLimits, RecordBatch, TimestampType};
use kafka_store::txn_index::BatchSummary;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// Why a partition's batch was not appended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    code: ErrorCode,
    message: Option<String>,
    /// Per-record errors (Produce v8+ `record_errors`): batch index and message.
    record_errors: Vec<(i32, Option<String>)>,
}

impl Failure {
    fn code(code: ErrorCode) -> Failure {
        Failure {
            code,
            message: None,
            record_errors: Vec::new(),
        }
    }
}

fn fail(code: ErrorCode, msg: impl Into<String>) -> Failure {
    Failure {
        code,
        message: Some(msg.into()),
        record_errors: Vec::new(),
    }
}

/// A Produce request checked against the topics, nothing appended yet.
pub(crate) struct Prepared {
    acks: i16,
    timeout: Duration,
    now: i64,
    topics: Vec<PerTopic<Result<Batch, Failure>>>,
}

/// A topic of the request with something per partition, in request order.
struct PerTopic<T> {
    name: bytestring::ByteString,
    topic_id: Uuid,
    partitions: Vec<(i32, T)>,
}

/// One partition's validated batch, as the topic stores it.
struct Batch {
    topic: String,
    batch: ValidBatch,
    id: BatchId,
    /// The append time the batch carries under LogAppendTime, else -1.
    append_time: i64,
    /// For a transactional batch: what its append needs.
    txn: Option<TxnBatch>,
}

/// A transactional batch's part in its transaction.
#[derive(Debug, Clone, Copy)]
struct TxnBatch {
    /// Offset delta of its last record.
    last_offset_delta: i32,
    /// The verification that lets it open a transaction in the partition.
    guard: Option<Guard>,
}

/// A Produce request whose appends hold their place in their partitions.
pub(crate) struct Submitted<'a> {
    acks: i16,
    timeout: Duration,
    topics: Vec<PerTopic<Pending<'a>>>,
    /// The partitions' locks, held shared until the request's idempotent appends are
    /// settled, so no recovery reads the log while one is in flight.
    _partitions: Vec<tokio::sync::RwLockReadGuard<'a, ()>>,
}

/// Where one partition's write stands.
enum Pending<'a> {
    Failed(Failure),
    /// Confirmed (or a retry of a write that already landed).
    Done(AppendOutcome),
    Appending {
        topic: String,
        id: BatchId,
        append_time: i64,
        /// For a transactional batch: its last offset delta, and its place in the
        /// partition's transaction index until its outcome is known.
        txn: Option<(i32, TxnTicket<'a>)>,
        /// An idempotent batch's place among its producer's batches in flight.
        ticket: Option<Ticket<'a>>,
        append: PendingAppend,
    },
    /// A retry of an idempotent batch still in flight: answered with its outcome.
    Retry {
        topic: String,
        original: InFlight,
    },
}

/// Starts a request: [`prepare`] and [`submit`] now; [`complete`] is the step that
/// completes it later.
pub(crate) async fn start(ctx: Ctx<'_>, req: ProduceRequest) -> Step<'_> {
    let prepared = prepare(&ctx, req).await;
    let submitted = submit(&ctx, prepared).await;
    Step::Later {
        reply: Box::pin(async move { complete(&ctx, submitted).await }),
    }
}

/// The checks of one request, owned so they can run on the validation pool.
#[derive(Clone, Copy)]
struct Checks {
    version: i16,
    limits: DecodeLimits,
    now: i64,
}

/// What a topic's settings ask of every batch appended to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rules {
    /// `compression.type`: the codec batches are stored with; `None` (`producer`) keeps
    /// the producer's.
    compression: Option<Compression>,
    /// `message.timestamp.type=LogAppendTime`.
    log_append_time: bool,
    /// `cleanup.policy` includes `compact`: keyless records are refused.
    compacted: bool,
    /// `message.timestamp.before.max.ms` (CreateTime only).
    before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (CreateTime only).
    after_max_ms: i64,
}

impl Rules {
    /// The topic's settings; the timestamp bounds are the topic's own when it names
    /// them, else the broker's (`limits.message_timestamp_*`).
    fn of(config: &TopicConfig, limits: &Limits) -> Rules {
        let named = |name: &str| config.overrides.contains_key(name);
        Rules {
            compression: match config.compression_type {
                CompressionType::Producer => None,
                CompressionType::Uncompressed => Some(Compression::None),
                CompressionType::Gzip => Some(Compression::Gzip),
                CompressionType::Snappy => Some(Compression::Snappy),
                CompressionType::Lz4 => Some(Compression::Lz4),
                CompressionType::Zstd => Some(Compression::Zstd),
            },
            log_append_time: config.message_timestamp_type == MessageTimestampType::LogAppendTime,
            compacted: config.cleanup_policy.compacts(),
            before_max_ms: if named("message.timestamp.before.max.ms") {
                config.message_timestamp_before_max_ms
            } else {
                limits.message_timestamp_before_max_ms
            },
            after_max_ms: if named("message.timestamp.after.max.ms") {
                config.message_timestamp_after_max_ms
            } else {
                limits.message_timestamp_after_max_ms
            },
        }
    }

    /// Whether batches may be encoded again (worth the validation pool).
    fn encodes(&self) -> bool {
        self.log_append_time || self.compression.is_some_and(|c| c != Compression::None)
    }
}

/// One partition's records waiting to be checked.
struct Job {
    records: Bytes,
    max_message_bytes: i32,
    compressed: bool,
    rules: Rules,
    /// `topic-partition`, for per-record messages.
    place: (String, i32),
}

/// Looks the topics up and validates every batch. Nothing is appended.
pub(crate) async fn prepare(ctx: &Ctx<'_>, req: ProduceRequest) -> Prepared {
    let log = &ctx.broker.stores.log;
    let limits = &ctx.broker.config.limits;
    let acks = req.acks;
    let refuse: Option<Failure> = if ctx.version < 3 {
        Some(fail(
            ErrorCode::UNSUPPORTED_VERSION,
            "Produce v0-2 (message format v0/v1) is not supported",
        ))
    } else if req.transactional_id.is_none() && holds_transactional(&req) {
        Some(fail(
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records need a transactional id",
        ))
    } else if !matches!(acks, -1..=1) {
        Some(fail(
            ErrorCode::INVALID_REQUIRED_ACKS,
            "acks must be -1, 0 or 1",
        ))
    } else {
        None
    };
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0).max(1000))
        .min(limits.max_produce_timeout);
    let unknown = if ctx.version >= 13 {
        ErrorCode::UNKNOWN_TOPIC_ID
    } else {
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
    };
    let mut named: HashMap<(bytestring::ByteString, Uuid, i32), u32> = HashMap::new();
    for topic in &req.topic_data {
        for p in &topic.partition_data {
            let n = named
                .entry((topic.name.clone(), topic.topic_id, p.index))
                .or_default();
            *n = n.saturating_add(1);
        }
    }
    let route = ctx.broker.route();
    let mut jobs = Vec::new();
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let lookup = if refuse.is_some() {
            Ok(None)
        } else if ctx.version >= 13 {
            log.topic_by_id(topic.topic_id.as_u128()).await
        } else {
            log.topic(&topic.name).await
        };
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            let repeated = named
                .get(&(topic.name.clone(), topic.topic_id, p.index))
                .is_some_and(|n| *n > 1);
            let checked = match (&refuse, &lookup) {
                (Some(f), _) => Err(f.clone()),
                _ if repeated => Err(fail(
                    ErrorCode::INVALID_REQUEST,
                    "the partition is named more than once in the request",
                )),
                (None, Err(e)) => Err(fail(e.error_code(), e.to_string())),
                (None, Ok(None)) => Err(Failure::code(unknown)),
                (None, Ok(Some(info)))
                    if (0..info.partitions).contains(&p.index)
                        && !route.leads(&info.name, p.index) =>
                {
                    // Another gateway leads it (or this one holds no lease): nothing
                    // is decoded or written.
                    Err(Failure::code(ErrorCode::NOT_LEADER_OR_FOLLOWER))
                }
                (None, Ok(Some(info))) => {
                    precheck(info, p.index, p.records).map(|(records, compressed)| {
                        jobs.push(Job {
                            records,
                            max_message_bytes: info.config.max_message_bytes,
                            compressed,
                            rules: Rules::of(&info.config, limits),
                            place: (info.name.clone(), p.index),
                        });
                        info.name.clone()
                    })
                }
            };
            partitions.push((p.index, checked));
        }
        topics.push(PerTopic {
            name: topic.name,
            topic_id: topic.topic_id,
            partitions,
        });
    }
    let now = now_ms();
    let checks = Checks {
        version: ctx.version,
        limits: DecodeLimits {
            max_decompressed_bytes: limits.max_decompressed_batch_bytes,
            max_records_per_batch: limits.max_records_per_batch,
        },
        now,
    };
    let budget = limits.max_decompressed_request_bytes;
    let heavy = jobs.iter().any(|j| j.compressed || j.rules.encodes())
        || jobs.iter().map(|j| j.records.len()).sum::<usize>() > limits.inline_validation_bytes;
    let results = if jobs.is_empty() {
        Vec::new()
    } else if heavy {
        let store = Arc::clone(&ctx.broker.stores.log);
        ctx.broker
            .cpu
            .run(move || validate_all(jobs, checks, budget, store.as_ref()))
            .await
            .unwrap_or_default()
    } else {
        validate_all(jobs, checks, budget, ctx.broker.stores.log.as_ref())
    };
    let mut results = results.into_iter();
    let mut out: Vec<PerTopic<Result<Batch, Failure>>> = Vec::with_capacity(topics.len());
    // Results come in job order, which is the order of the partitions that passed.
    for topic in topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for (index, checked) in topic.partitions {
            let checked = match checked {
                Err(f) => Err(f),
                Ok(name) => match results.next() {
                    Some(Ok((batch, id))) => {
                        let h = batch.header();
                        let append_time =
                            if h.attributes.timestamp_type() == TimestampType::LogAppendTime {
                                h.max_timestamp
                            } else {
                                -1
                            };
                        Ok(Batch {
                            topic: name,
                            txn: h.attributes.is_transactional().then_some(TxnBatch {
                                last_offset_delta: h.last_offset_delta,
                                guard: None,
                            }),
                            batch,
                            id,
                            append_time,
                        })
                    }
                    Some(Err(f)) => Err(f),
                    None => Err(fail(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        "the batch could not be checked",
                    )),
                },
            };
            partitions.push((index, checked));
        }
        out.push(PerTopic {
            name: bytestring::ByteString::from(&*topic.name),
            topic_id: topic.topic_id,
            partitions,
        });
    }
    if let Some(transactional_id) = req.transactional_id.as_deref() {
        verify_all(ctx, transactional_id, &mut out, timeout).await;
    }
    Prepared {
        acks,
        timeout,
        now,
        topics: out,
    }
}

/// Whether any partition's records are a transactional batch (the attributes' bit 4,
/// read without decoding; a batch too short to say is left to validation).
fn holds_transactional(req: &ProduceRequest) -> bool {
    req.topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .any(|p| {
            p.records
                .as_ref()
                .and_then(|r| r.get(22))
                .is_some_and(|a| a & 0x10 != 0)
        })
}

/// Verifications at once per request.
const VERIFICATIONS_AT_ONCE: usize = 16;

/// Verifies with the transaction coordinator every transactional batch that would open
/// a transaction in its partition (KIP-890 part 1); a positive answer leaves a guard for
/// [`submit`], any other refuses the batch.
async fn verify_all(
    ctx: &Ctx<'_>,
    transactional_id: &str,
    topics: &mut [PerTopic<Result<Batch, Failure>>],
    timeout: Duration,
) {
    use futures_util::StreamExt;
    let parts = &ctx.broker.txn_partitions;
    let producers = &ctx.broker.producers;
    let mut wanted = Vec::new();
    for (ti, t) in topics.iter_mut().enumerate() {
        for (pi, (index, checked)) in t.partitions.iter_mut().enumerate() {
            let Ok(b) = checked else {
                continue;
            };
            if b.txn.is_none()
                || !b.id.idempotent()
                || !parts.needs_verification(&b.topic, *index, b.id.producer_id)
            {
                continue;
            }
            // A producer fenced here already (a marker at a newer epoch) is refused
            // without asking its coordinator.
            if producers
                .epoch(&b.topic, *index, b.id.producer_id)
                .is_some_and(|e| e > b.id.epoch)
            {
                *checked = Err(Failure::code(ErrorCode::INVALID_PRODUCER_EPOCH));
                continue;
            }
            wanted.push((ti, pi, b.topic.clone(), *index, b.id));
        }
    }
    if wanted.is_empty() {
        return;
    }
    let router = &ctx.broker.txn_router;
    let answers: Vec<_> = futures_util::stream::iter(wanted)
        .map(|(ti, pi, topic, index, id)| async move {
            let asked = router.verify(transactional_id, id.producer_id, id.epoch, &topic, index);
            let code = tokio::time::timeout(timeout, asked)
                .await
                .unwrap_or(ErrorCode::REQUEST_TIMED_OUT);
            (ti, pi, topic, index, id.producer_id, code)
        })
        .buffer_unordered(VERIFICATIONS_AT_ONCE)
        .collect()
        .await;
    let mut refused = 0usize;
    for (ti, pi, topic, index, producer_id, code) in answers {
        let Some((_, slot)) = topics.get_mut(ti).and_then(|t| t.partitions.get_mut(pi)) else {
            continue;
        };
        if code == ErrorCode::NONE {
            if let Ok(b) = slot
                && let Some(txn) = b.txn.as_mut()
            {
                txn.guard = Some(parts.set_guard(&topic, index, producer_id));
            }
            continue;
        }
        refused += 1;
        *slot = Err(verification_failure(code, ctx.version));
    }
    if refused > 0 {
        debug!(
            partitions = refused,
            "produce: transactional batches not verified"
        );
    }
}

/// What a producer is told when its coordinator did not confirm the partition in its
/// transaction (Kafka's mapping for Produce).
fn verification_failure(code: ErrorCode, version: i16) -> Failure {
    match code {
        ErrorCode::CONCURRENT_TRANSACTIONS
        | ErrorCode::COORDINATOR_NOT_AVAILABLE
        | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        | ErrorCode::NOT_COORDINATOR
        | ErrorCode::NOT_LEADER_OR_FOLLOWER
        | ErrorCode::REQUEST_TIMED_OUT
        | ErrorCode::NETWORK_EXCEPTION => fail(
            ErrorCode::NOT_ENOUGH_REPLICAS,
            "the transaction coordinator could not be asked now",
        ),
        ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH => {
            Failure::code(ErrorCode::INVALID_PRODUCER_EPOCH)
        }
        _ => not_in_transaction(version),
    }
}

/// A transactional batch that would open a transaction its coordinator does not know of.
fn not_in_transaction(version: i16) -> Failure {
    fail(
        if version >= 11 {
            ErrorCode::TRANSACTION_ABORTABLE
        } else {
            ErrorCode::INVALID_TXN_STATE
        },
        "Partition was not added to the transaction",
    )
}

/// The checks that need no decoding: the partition exists, the records hold exactly one
/// batch (Produce v3+), its size is within `max.message.bytes`. Returns the records and
/// whether they are compressed.
fn precheck(
    topic: &TopicInfo,
    partition: i32,
    records: Option<Bytes>,
) -> Result<(Bytes, bool), Failure> {
    if partition < 0 || partition >= topic.partitions {
        return Err(Failure::code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
    }
    let records = records.unwrap_or_default();
    if records.is_empty() {
        return Err(fail(ErrorCode::INVALID_RECORD, "no record batch"));
    }
    // baseOffset (8) and batchLength (4) frame the first batch.
    if let Some(len) = records.get(8..12) {
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let whole = usize::try_from(len).ok().and_then(|l| l.checked_add(12));
        if whole.is_some_and(|w| records.len() > w) {
            return Err(fail(
                ErrorCode::INVALID_RECORD,
                "Produce v3 and later must carry exactly one record batch per partition",
            ));
        }
    }
    let max = usize::try_from(topic.config.max_message_bytes).unwrap_or(0);
    if records.len() > max {
        return Err(fail(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "batch of {} bytes exceeds max.message.bytes {max}",
                records.len()
            ),
        ));
    }
    let compressed = names_a_codec(&records);
    Ok((records, compressed))
}

/// Whether the first batch's attributes (offset 21, the low three bits) name a codec.
fn names_a_codec(records: &Bytes) -> bool {
    records.get(21..23).is_some_and(|a| a[1] & 0x07 != 0)
}

/// Checks the jobs in order within one decompression budget, and has `store` prepare
/// each batch during the check's walk over its records ([`LogStore::preparer`]), while
/// they are fresh in this thread's cache.
fn validate_all(
    jobs: Vec<Job>,
    checks: Checks,
    mut budget: usize,
    store: &dyn LogStore,
) -> Vec<Result<(ValidBatch, BatchId), Failure>> {
    let mut refused_for_budget = 0usize;
    let out = jobs
        .into_iter()
        .map(|job| {
            let (topic, partition) = &job.place;
            // The store prepares the batch in the check's own walk over its records when
            // the batch reaches the store with the records as checked: within
            // max.message.bytes, and neither a control batch nor one whose records
            // validation rewrites (the topic's codec or timestamp type), as a rewritten
            // batch carries nothing prepared. Those are prepared once rewritten, in a walk
            // of their own. The leader epoch is stamped after the walk without touching
            // the records (the Java producer sends -1): the sink is told the stamped one.
            let max = usize::try_from(job.max_message_bytes).unwrap_or(0);
            let mut asked = false;
            let mut sink_for = |batch: &RecordBatch, section: &Bytes| {
                let kept = batch.encoded_len() <= max
                    && !batch.is_control()
                    && !job.rules.log_append_time
                    && batch.timestamp_type() == TimestampType::CreateTime
                    && job
                        .rules
                        .compression
                        .is_none_or(|c| c == batch.compression());
                asked |= kept;
                if kept {
                    store.preparer(topic, *partition, batch, section, STORED_LEADER_EPOCH)
                } else {
                    None
                }
            };
            let r = validate(&job, &checks, &mut budget, &mut sink_for);
            if job.compressed && budget == 0 && r.is_err() {
                refused_for_budget += 1;
            }
            r.map(|(batch, id)| {
                if asked || batch.prepared().is_some() {
                    return (batch, id);
                }
                match store.prepare(topic, *partition, &batch) {
                    Some(prepared) => (batch.with_prepared(prepared), id),
                    None => (batch, id),
                }
            })
        })
        .collect();
    if refused_for_budget > 0 {
        debug!(
            partitions = refused_for_budget,
            "produce request past its decompression budget"
        );
    }
    out
}

/// Checks one partition's batch ([`check_batches_with`]: CRC, records, counts; once, for the
/// whole way to the store) and the gateway's own rules, and returns it stamped with
/// leader epoch 0, ready to append, with its producer identity.
fn validate(
    job: &Job,
    checks: &Checks,
    budget: &mut usize,
    sink_for: &mut SinkFor<'_>,
) -> Result<(ValidBatch, BatchId), Failure> {
    let mut limits = checks.limits;
    if job.compressed {
        if *budget == 0 {
            return Err(fail(
                ErrorCode::MESSAGE_TOO_LARGE,
                "the request's batches decompress past max_decompressed_request_bytes",
            ));
        }
        limits.max_decompressed_bytes = limits.max_decompressed_bytes.min(*budget);
    }
    let checked = match check_batches_with(&job.records, &limits, sink_for) {
        Ok(c) => c,
        Err(e) => {
            if job.compressed {
                // The decoder may have inflated up to its limit before failing.
                *budget = budget.saturating_sub(limits.max_decompressed_bytes);
            }
            return Err(fail(e.kafka_error_code(), e.to_string()));
        }
    };
    if job.compressed {
        let inflated: usize = checked.batches.iter().map(ValidBatch::records_len).sum();
        *budget = budget.saturating_sub(inflated);
    }
    if checked.truncated_tail > 0 {
        return Err(fail(
            ErrorCode::CORRUPT_MESSAGE,
            format!(
                "{} bytes of a partial batch at the end",
                checked.truncated_tail
            ),
        ));
    }
    let mut batches = checked.batches.into_iter();
    let (Some(batch), None) = (batches.next(), batches.next()) else {
        return Err(fail(
            ErrorCode::INVALID_RECORD,
            "Produce v3 and later must carry exactly one record batch per partition",
        ));
    };
    let max = usize::try_from(job.max_message_bytes).unwrap_or(0);
    if batch.len() > max {
        return Err(fail(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "batch of {} bytes exceeds max.message.bytes {max}",
                batch.len()
            ),
        ));
    }
    if batch.batch().is_control() {
        return Err(fail(
            ErrorCode::INVALID_RECORD,
            "control batches are written by partition leaders only",
        ));
    }
    if batch.batch().is_transactional() && batch.header().producer_id < 0 {
        return Err(fail(
            ErrorCode::INVALID_RECORD,
            "a transactional batch needs a producer id",
        ));
    }
    if batch.batch().compression() == Compression::Zstd && checks.version < 7 {
        return Err(fail(
            ErrorCode::UNSUPPORTED_COMPRESSION_TYPE,
            "zstd needs Produce v7 or later",
        ));
    }
    check_records(&batch, job, checks.now)?;
    // The topic's codec and timestamp type (Kafka's broker recompresses on append too),
    // then max.message.bytes again on what is stored, as Kafka checks the batch again
    // when validation changed its size.
    let append_time = job.rules.log_append_time.then_some(checks.now);
    let batch = batch
        .restamped(job.rules.compression, append_time)
        .map_err(|e| fail(e.kafka_error_code(), e.to_string()))?;
    if batch.len() > max {
        return Err(fail(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "batch of {} bytes as stored with compression.type {} exceeds \
                 max.message.bytes {max}",
                batch.len(),
                codec_name(job.rules.compression)
            ),
        ));
    }
    let h = *batch.header();
    // Stored batches carry leader epoch 0. Most producers already send 0 (librdkafka
    // does; the Java producer sends -1); the others' batches get it in their header, and
    // the store writes it where it copies the bytes (`ValidBatch::to_bytes_mut`). What
    // the store prepared in the check's walk was made for the stamped batch (see
    // `validate_all`), so it goes with it: the stamp leaves the records as they were.
    let prepared = batch.prepared().cloned();
    let batch = batch.with_leader_epoch(STORED_LEADER_EPOCH);
    let batch = match prepared {
        Some(p) if batch.prepared().is_none() => batch.with_prepared(p),
        _ => batch,
    };
    Ok((
        batch,
        BatchId {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            records: h.record_count,
        },
    ))
}

/// The checks [`prepare`] applies to one partition's `records` for a topic with Kafka's
/// default settings and the broker's default limits, at Produce v9 and clock `now`: the
/// batch as it would be handed to the store, or the error code it would be answered.
/// For benchmarks of the produce path outside a running broker.
#[doc(hidden)]
pub fn check_with_defaults(records: Bytes, now: i64) -> Result<ValidBatch, ErrorCode> {
    let limits = Limits::default();
    let config = TopicConfig::default();
    let compressed = names_a_codec(&records);
    let job = Job {
        records,
        max_message_bytes: config.max_message_bytes,
        compressed,
        rules: Rules::of(&config, &limits),
        place: (String::new(), 0),
    };
    let checks = Checks {
        version: 9,
        limits: DecodeLimits {
            max_decompressed_bytes: limits.max_decompressed_batch_bytes,
            max_records_per_batch: limits.max_records_per_batch,
        },
        now,
    };
    let mut budget = limits.max_decompressed_request_bytes;
    validate(&job, &checks, &mut budget, &mut |_, _| None)
        .map(|(batch, _)| batch)
        .map_err(|f| f.code)
}

/// `compression.type` as Kafka names it.
fn codec_name(codec: Option<Compression>) -> &'static str {
    match codec {
        None => "producer",
        Some(Compression::None) => "uncompressed",
        Some(Compression::Gzip) => "gzip",
        Some(Compression::Snappy) => "snappy",
        Some(Compression::Lz4) => "lz4",
        Some(Compression::Zstd) => "zstd",
        Some(_) => "another codec",
    }
}

/// The partition leader epoch of every stored batch: the gateway is each partition's
/// only leader, and its epoch never changes.
const STORED_LEADER_EPOCH: i32 = 0;

/// Per-record messages given in `record_errors`; later failing records are listed by
/// index only, so the answer stays smaller than the batch that caused it.
const RECORD_ERROR_MESSAGES: usize = 3;

/// The per-record rules of Kafka's log validator, every record looked at: on a
/// compacted topic a record must have a key (`INVALID_RECORD`); on a CreateTime topic a
/// record's timestamp must lie within `message.timestamp.before.max.ms` /
/// `after.max.ms` of the broker's clock (KIP-937; `INVALID_TIMESTAMP`), and a producer
/// may not set the LogAppendTime bit itself. Any failing record refuses the whole
/// batch, with the failing records' indexes in `record_errors`.
fn check_records(batch: &ValidBatch, job: &Job, now: i64) -> Result<(), Failure> {
    let rules = &job.rules;
    let create_time = !rules.log_append_time;
    let bounded =
        create_time && (rules.before_max_ms != i64::MAX || rules.after_max_ms != i64::MAX);
    let producer_lat = batch.batch().timestamp_type() == TimestampType::LogAppendTime;
    if !rules.compacted && !bounded && !producer_lat {
        return Ok(());
    }
    // What the check's walk saw settles the common case without reading the records
    // again: no keyless record where keys are needed, every timestamp within bounds.
    let summary = batch.summary();
    if !producer_lat
        && (!rules.compacted || summary.keyless == 0)
        && (!bounded || summary.timestamps_within(now, rules.before_max_ms, rules.after_max_ms))
    {
        return Ok(());
    }
    let (topic, partition) = &job.place;
    let mut errors: Vec<(i32, Option<String>)> = Vec::new();
    let mut shown: Vec<String> = Vec::new();
    let mut bad_timestamp = false;
    for (i, record) in batch.records().enumerate() {
        let Ok(record) = record else {
            // Every record was read once already by check_batches.
            continue;
        };
        let ts = record.timestamp;
        let message = if rules.compacted && record.key.is_none() {
            Some(format!(
                "Compacted topic cannot accept message without key in topic partition \
                 {topic}-{partition}"
            ))
        } else if create_time && ts != -1 {
            let behind = now.saturating_sub(ts);
            let ahead = ts.saturating_sub(now);
            (behind > rules.before_max_ms || ahead > rules.after_max_ms).then(|| {
                bad_timestamp = true;
                format!(
                    "Timestamp {ts} of message with offset {i} is out of range. The timestamp \
                     should be within [{}, {}]",
                    now.saturating_sub(rules.before_max_ms),
                    now.saturating_add(rules.after_max_ms)
                )
            })
        } else if producer_lat {
            bad_timestamp = true;
            Some(format!(
                "Invalid timestamp type in message {i}. Producer should not set timestamp type \
                 to LogAppendTime."
            ))
        } else {
            None
        };
        if let Some(message) = message {
            let index = i32::try_from(i).unwrap_or(i32::MAX);
            if shown.len() < RECORD_ERROR_MESSAGES {
                shown.push(format!(
                    "RecordError(batchIndex={index}, message='{message}')"
                ));
                errors.push((index, Some(message)));
            } else {
                errors.push((index, None));
            }
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    let (code, message) = if bad_timestamp {
        (
            ErrorCode::INVALID_TIMESTAMP,
            "One or more records have been rejected due to invalid timestamp".to_owned(),
        )
    } else {
        (
            ErrorCode::INVALID_RECORD,
            format!(
                "One or more records have been rejected due to {} record errors in total, and \
                 only showing the first three errors at most: [{}]",
                errors.len(),
                shown.join(", ")
            ),
        )
    };
    Err(Failure {
        code,
        message: Some(message),
        record_errors: errors,
    })
}

/// Checks producer state and hands every partition's batch to the store, in request
/// order. Once this returns, the batches hold their place in their partitions: a later
/// request's batches land after them. Idempotent batches are checked, appended and
/// recorded under their partitions' producer locks, so they are confirmed before this
/// returns.
pub(crate) async fn submit<'a>(ctx: &Ctx<'a>, prepared: Prepared) -> Submitted<'a> {
    let idempotent: Vec<(&str, i32, i64, bool)> = prepared
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|(index, checked)| match checked {
            Ok(b) if b.id.idempotent() => {
                Some((&*b.topic, *index, b.id.producer_id, b.txn.is_some()))
            }
            _ => None,
        })
        .collect();
    let guards = if idempotent.is_empty() {
        Some(Locks::None)
    } else {
        tokio::time::timeout(prepared.timeout, lock_idempotent(ctx, &idempotent))
            .await
            .ok()
    };
    let mut ready = match &guards {
        Some(Locks::Exclusive { .. }) => recover_all(ctx, &prepared).await,
        // Every partition was found ready under the shared locks.
        Some(Locks::Shared { .. }) => idempotent
            .iter()
            .map(|(topic, partition, ..)| (((*topic).to_owned(), *partition), Ok(())))
            .collect(),
        _ => HashMap::new(),
    };
    // Under shared locks nothing may be rebuilt from the log (appends are in flight).
    let may_recover = matches!(guards, Some(Locks::Exclusive { .. }));
    let mut topics = Vec::with_capacity(prepared.topics.len());
    for topic in prepared.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for (index, checked) in topic.partitions {
            let pending = match checked {
                Err(f) => Pending::Failed(f),
                Ok(b) if b.id.idempotent() && guards.is_none() => Pending::Failed(fail(
                    ErrorCode::REQUEST_TIMED_OUT,
                    "the partition's producer state stayed busy",
                )),
                Ok(b) if b.id.idempotent() => {
                    match ready.remove(&(b.topic.clone(), index)).unwrap_or_else(|| {
                        Err(fail(ErrorCode::UNKNOWN_SERVER_ERROR, "no recovery outcome"))
                    }) {
                        Ok(()) => {
                            let (now, timeout) = (prepared.now, prepared.timeout);
                            submit_partition(ctx, b, index, now, timeout, may_recover).await
                        }
                        Err(f) => Pending::Failed(f),
                    }
                }
                Ok(b) => {
                    submit_partition(ctx, b, index, prepared.now, prepared.timeout, false).await
                }
            };
            partitions.push((index, pending));
        }
        topics.push(PerTopic {
            name: topic.name,
            topic_id: topic.topic_id,
            partitions,
        });
    }
    // Under shared locks the batches are in flight in the producer state and the next
    // ones are checked against them: the producers' locks go now, the partitions' stay
    // until the appends are settled. Under exclusive locks (a recovery) everything is
    // confirmed and recorded before they go.
    let partitions = match guards {
        Some(Locks::Shared { own, partitions }) => {
            drop(own);
            partitions
        }
        Some(Locks::Exclusive { own, partitions }) => {
            topics = settle_all(ctx, topics, prepared.timeout).await;
            drop((own, partitions));
            Vec::new()
        }
        Some(Locks::None) | None => Vec::new(),
    };
    Submitted {
        acks: prepared.acks,
        timeout: prepared.timeout,
        topics,
        _partitions: partitions,
    }
}

/// The locks a request's idempotent batches are checked, appended and recorded under.
enum Locks<'a> {
    /// No idempotent batch.
    None,
    /// The producers' locks, and their partitions' locks shared with other producers'
    /// appends: every partition was ready (led here, producer state recovered and, for
    /// a transactional batch, the transaction index current and the topic flagged
    /// transactional in the store).
    Shared {
        own: Vec<tokio::sync::MutexGuard<'a, ()>>,
        partitions: Vec<tokio::sync::RwLockReadGuard<'a, ()>>,
    },
    /// The producers' locks and their partitions' locks alone, for a recovery.
    Exclusive {
        own: Vec<tokio::sync::MutexGuard<'a, ()>>,
        partitions: Vec<tokio::sync::RwLockWriteGuard<'a, ()>>,
    },
}

/// Takes the locks of `idempotent` (topic, partition, producer id, transactional): the
/// producers' first, then their partitions' shared if every partition is ready for its
/// batch, else exclusive.
async fn lock_idempotent<'a>(ctx: &Ctx<'a>, idempotent: &[(&str, i32, i64, bool)]) -> Locks<'a> {
    let producers: &'a crate::producers::Producers = &ctx.broker.producers;
    let partitions: Vec<usize> = idempotent
        .iter()
        .map(|(topic, partition, ..)| producers.stripe(topic, *partition))
        .collect();
    let own = producers
        .lock_producers(
            idempotent
                .iter()
                .map(|(topic, partition, id, _)| producers.producer_stripe(topic, *partition, *id))
                .collect(),
        )
        .await;
    let shared = producers.lock_shared(partitions.clone()).await;
    let membership = ctx.broker.membership.as_ref();
    let txns = &ctx.broker.txn_partitions;
    let ready = idempotent.iter().all(|(topic, partition, _, txn)| {
        matches!(
            producers.readiness(membership, topic, *partition),
            Ok(crate::producers::Readiness::Ready)
        ) && (!*txn || (txns.is_ready(membership, topic, *partition) && txns.is_flagged(topic)))
    });
    if ready {
        return Locks::Shared {
            own,
            partitions: shared,
        };
    }
    drop(shared);
    Locks::Exclusive {
        own,
        partitions: producers.lock(partitions).await,
    }
}

/// Makes every partition of the request's idempotent batches ready for its check
/// ([`crate::producers::Producers::ensure_recovered`]), as many at a time as the
/// gateway's recovery limit allows, all within the request's timeout. The caller holds
/// their stripe locks.
async fn recover_all(
    ctx: &Ctx<'_>,
    prepared: &Prepared,
) -> HashMap<(String, i32), Result<(), Failure>> {
    use futures_util::StreamExt;
    let mut wanted: Vec<(String, i32)> = prepared
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|(index, checked)| match checked {
            Ok(b) if b.id.idempotent() => Some((b.topic.clone(), *index)),
            _ => None,
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let deadline = tokio::time::Instant::now() + prepared.timeout;
    let producers = &ctx.broker.producers;
    let log = ctx.broker.stores.log.as_ref();
    let membership = ctx.broker.membership.as_ref();
    let window = ctx.broker.config.limits.producer_state_recovery_bytes;
    futures_util::stream::iter(wanted)
        .map(|(topic, partition)| async move {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let outcome = producers
                .ensure_recovered(log, membership, &topic, partition, window, left)
                .await
                .map_err(|(code, message)| Failure {
                    code,
                    message,
                    record_errors: Vec::new(),
                });
            ((topic, partition), outcome)
        })
        .buffer_unordered(
            ctx.broker
                .config
                .limits
                .max_concurrent_producer_recoveries
                .max(1),
        )
        .collect()
        .await
}

/// Checks one partition's batch against its producer's state and hands it to the store.
/// `may_recover`: the caller holds the partition's lock exclusively, so a transaction
/// index may be rebuilt from the log here.
async fn submit_partition<'a>(
    ctx: &Ctx<'a>,
    b: Batch,
    partition: i32,
    now: i64,
    timeout: Duration,
    may_recover: bool,
) -> Pending<'a> {
    let producers: &'a crate::producers::Producers = &ctx.broker.producers;
    let log = &ctx.broker.stores.log;
    if b.txn.is_some()
        && let Err(f) = ready_for_txn(ctx, &b.topic, partition, may_recover).await
    {
        return Pending::Failed(f);
    }
    match producers.check(&b.topic, partition, b.id, now) {
        Ok(Verdict::Append) => {}
        // A retry of a write that already landed: answer with its offset.
        // A retry of a batch still in flight: answered with that batch's outcome.
        Ok(Verdict::InFlight(original)) => {
            return Pending::Retry {
                topic: b.topic,
                original,
            };
        }
        Ok(Verdict::Duplicate(base_offset)) => {
            return match log.watermarks(&b.topic, partition).await {
                Ok(w) => Pending::Done(AppendOutcome {
                    base_offset,
                    log_append_time: -1,
                    log_start_offset: w.log_start_offset,
                }),
                Err(e) => Pending::Failed(fail(e.error_code(), e.to_string())),
            };
        }
        Err(code) => return Pending::Failed(Failure::code(code)),
    }
    let parts: &'a crate::txns::partitions::TxnPartitions = &ctx.broker.txn_partitions;
    // From here an append whose outcome is not folded in (the store refuses it, the
    // request goes away) has the transaction index rebuilt from the log (the ticket's
    // drop).
    let txn = match b.txn {
        None => None,
        Some(txn) => {
            match parts.begin_append(&b.topic, partition, b.id.producer_id, b.id.epoch, txn.guard) {
                Ok(opens) => Some((
                    txn.last_offset_delta,
                    TxnTicket::new(parts, &b.topic, partition, opens),
                )),
                Err(code) => {
                    return Pending::Failed(if code == ErrorCode::INVALID_TXN_STATE {
                        not_in_transaction(ctx.version)
                    } else {
                        Failure::code(code)
                    });
                }
            }
        }
    };
    let submitted =
        tokio::time::timeout(timeout, log.submit(&b.topic, partition, vec![b.batch], now)).await;
    if !matches!(submitted, Ok(Ok(_))) && b.id.idempotent() {
        // The batch may still land: only the log can tell, so read it again next time
        // (the transaction index too: `txn` is dropped unsettled).
        producers.unrecover(&b.topic, partition);
    }
    match submitted {
        Ok(Ok(append)) => Pending::Appending {
            ticket: producers.begin(&b.topic, partition, b.id, now),
            topic: b.topic,
            id: b.id,
            append_time: b.append_time,
            txn,
            append,
        },
        Ok(Err(e)) => Pending::Failed(fail(e.error_code(), e.to_string())),
        Err(_) => Pending::Failed(timed_out()),
    }
}

/// Makes a partition ready for a transactional batch (under its producer lock): its
/// transaction index current (rebuilt from the log only if `may_recover`), and its topic
/// flagged transactional in the store.
async fn ready_for_txn(
    ctx: &Ctx<'_>,
    topic: &str,
    partition: i32,
    may_recover: bool,
) -> Result<(), Failure> {
    let broker = ctx.broker;
    let parts = &broker.txn_partitions;
    let log = broker.stores.log.as_ref();
    let not_loaded = |code| {
        fail(
            code,
            "the partition's transaction state is not loaded; retry",
        )
    };
    if may_recover {
        parts
            .ensure_recovered(log, broker.membership.as_ref(), topic, partition)
            .await
            .map_err(not_loaded)?;
    } else if !parts.is_ready(broker.membership.as_ref(), topic, partition) {
        // Dropped since the request's locks were taken (another partition's index took
        // its place): the retry rebuilds it.
        return Err(not_loaded(ErrorCode::NOT_LEADER_OR_FOLLOWER));
    }
    if !parts.is_flagged(topic) {
        log.mark_transactional(topic)
            .await
            .map_err(|e| fail(e.error_code(), e.to_string()))?;
        parts.flagged(topic);
    }
    Ok(())
}

fn timed_out() -> Failure {
    fail(
        ErrorCode::REQUEST_TIMED_OUT,
        "the store did not confirm the append in time",
    )
}

/// Waits for one partition's append and records it in the producer state.
async fn settle<'a>(
    ctx: &Ctx<'_>,
    partition: i32,
    pending: Pending<'a>,
    timeout: Duration,
) -> Pending<'a> {
    let (topic, id, append_time, txn, ticket, append) = match pending {
        Pending::Appending {
            topic,
            id,
            append_time,
            txn,
            ticket,
            append,
        } => (topic, id, append_time, txn, ticket, append),
        Pending::Retry { topic, original } => {
            return match tokio::time::timeout(timeout, original.outcome()).await {
                Ok(Ok(base_offset)) => {
                    match ctx.broker.stores.log.watermarks(&topic, partition).await {
                        Ok(w) => Pending::Done(AppendOutcome {
                            base_offset,
                            log_append_time: -1,
                            log_start_offset: w.log_start_offset,
                        }),
                        Err(e) => Pending::Failed(fail(e.error_code(), e.to_string())),
                    }
                }
                Ok(Err(code)) => Pending::Failed(fail(
                    code,
                    "the same batch, sent before, failed with this error",
                )),
                Err(_) => Pending::Failed(timed_out()),
            };
        }
        done => return done,
    };
    let outcome = match tokio::time::timeout(timeout, append).await {
        // Under LogAppendTime the answer carries the time stamped on the batch.
        Ok(Ok(a)) if append_time >= 0 => AppendOutcome {
            log_append_time: append_time,
            ..a
        },
        Ok(Ok(a)) => a,
        failed => {
            let failure = match failed {
                Ok(Err(e)) => fail(e.error_code(), e.to_string()),
                _ => timed_out(),
            };
            // Whether the batch landed is unknown (a store may still write it after an
            // error or a timeout): the next batch of the partition reads the log again
            // rather than trust the state held here (the ticket's failure marks it so,
            // and the transaction ticket's drop marks the transaction index).
            match ticket {
                Some(ticket) => ticket.failed(failure.code),
                None if id.idempotent() => ctx.broker.producers.unrecover(&topic, partition),
                None => {}
            }
            drop(txn);
            return Pending::Failed(failure);
        }
    };
    if let Some(ticket) = ticket {
        ticket.landed(outcome.base_offset, crate::broker::now_ms());
    }
    if id.idempotent() {
        let last_delta = txn
            .as_ref()
            .map_or(id.records.saturating_sub(1), |(delta, _)| *delta);
        let summary = BatchSummary {
            base_offset: outcome.base_offset,
            last_offset: outcome.base_offset.saturating_add(i64::from(last_delta)),
            producer_id: id.producer_id,
            producer_epoch: id.epoch,
            transactional: txn.is_some(),
            marker: None,
        };
        match txn {
            Some((_, txn)) => txn.landed(&summary),
            // Moves the partition's end only.
            None => ctx
                .broker
                .txn_partitions
                .appended(&topic, partition, &summary, false),
        }
    }
    Pending::Done(outcome)
}

/// Settles every partition of a request at once, keeping the shape.
async fn settle_all<'a>(
    ctx: &Ctx<'_>,
    topics: Vec<PerTopic<Pending<'a>>>,
    timeout: Duration,
) -> Vec<PerTopic<Pending<'a>>> {
    let mut waits = Vec::new();
    let mut shapes = Vec::with_capacity(topics.len());
    for PerTopic {
        name,
        topic_id,
        partitions,
    } in topics
    {
        let mut indexes = Vec::with_capacity(partitions.len());
        for (index, pending) in partitions {
            indexes.push(index);
            waits.push(settle(ctx, index, pending, timeout));
        }
        shapes.push((name, topic_id, indexes));
    }
    let mut outcomes = futures_util::future::join_all(waits).await.into_iter();
    shapes
        .into_iter()
        .map(|(name, topic_id, indexes)| PerTopic {
            name,
            topic_id,
            partitions: indexes
                .into_iter()
                .map(|index| {
                    let p = outcomes.next().unwrap_or_else(|| {
                        Pending::Failed(fail(ErrorCode::UNKNOWN_SERVER_ERROR, "no outcome"))
                    });
                    (index, p)
                })
                .collect(),
        })
        .collect()
}

/// Waits for the store to confirm every append and builds the response (not sent for
/// acks=0).
pub(crate) async fn complete(ctx: &Ctx<'_>, submitted: Submitted<'_>) -> Reply {
    let Submitted {
        acks,
        timeout,
        topics,
        _partitions: partitions,
    } = submitted;
    let topics = settle_all(ctx, topics, timeout).await;
    // Every append settled: a recovery may read the partitions now.
    drop(partitions);
    // Partitions refused as led elsewhere name their leader (v10+, KIP-951).
    let route = (ctx.version >= 10).then(|| ctx.broker.route());
    let mut hinted: BTreeSet<i32> = BTreeSet::new();
    let mut refused = 0usize;
    let mut responses = Vec::with_capacity(topics.len());
    for PerTopic {
        name,
        topic_id,
        partitions,
    } in topics
    {
        let mut partition_responses = Vec::with_capacity(partitions.len());
        for (index, pending) in partitions {
            let outcome = match pending {
                Pending::Done(a) => Ok(a),
                Pending::Failed(f) => Err(f),
                Pending::Appending { .. } | Pending::Retry { .. } => {
                    Err(fail(ErrorCode::UNKNOWN_SERVER_ERROR, "no outcome"))
                }
            };
            partition_responses.push(match outcome {
                Ok(a) => PartitionProduceResponse {
                    index,
                    error_code: ErrorCode::NONE.code(),
                    base_offset: a.base_offset,
                    log_append_time_ms: a.log_append_time,
                    log_start_offset: a.log_start_offset,
                    ..PartitionProduceResponse::default()
                },
                Err(Failure {
                    code,
                    message: msg,
                    record_errors,
                }) => {
                    refused += 1;
                    if refused == 1 {
                        debug!(topic = %name, partition = index, %code, ?msg, "produce refused");
                    }
                    let mut response = PartitionProduceResponse {
                        index,
                        error_code: code.code(),
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        error_message: if ctx.version >= 8 { msg.map(bs) } else { None },
                        record_errors: if ctx.version >= 8 {
                            record_errors
                                .into_iter()
                                .map(|(batch_index, m)| BatchIndexAndErrorMessage {
                                    batch_index,
                                    batch_index_error_message: m.map(bs),
                                    ..BatchIndexAndErrorMessage::default()
                                })
                                .collect()
                        } else {
                            Vec::new()
                        },
                        ..PartitionProduceResponse::default()
                    };
                    // From v13 the request names topics by id only: no name to place.
                    if code == ErrorCode::NOT_LEADER_OR_FOLLOWER
                        && let Some(route) = &route
                        && let Some(node) = leader_hint(route, &name, index)
                    {
                        response.current_leader = LeaderIdAndEpoch {
                            leader_id: node,
                            leader_epoch: 0,
                            ..LeaderIdAndEpoch::default()
                        };
                        hinted.insert(node);
                    }
                    response
                }
            });
        }
        responses.push(TopicProduceResponse {
            name: if ctx.version >= 13 {
                Default::default()
            } else {
                name
            },
            topic_id: if ctx.version >= 13 {
                topic_id
            } else {
                Uuid::ZERO
            },
            partition_responses,
            ..TopicProduceResponse::default()
        });
    }
    if refused > 1 {
        debug!(partitions = refused, "produce request: partitions refused");
    }
    let node_endpoints = match &route {
        Some(route) if !hinted.is_empty() => hinted_endpoints(ctx, route, &hinted)
            .map(|(node_id, host, port)| NodeEndpoint {
                node_id,
                host: bs(host),
                port: i32::from(port),
                rack: None,
                ..NodeEndpoint::default()
            })
            .collect(),
        _ => Vec::new(),
    };
    let response = ProduceResponse {
        responses,
        node_endpoints,
        ..ProduceResponse::default()
    }
    .into();
    if acks == 0 {
        Reply::Unsent(response)
    } else {
        Reply::Body(response)
    }
}

#[cfg(test)]
#[path = "produce_tests.rs"]
mod tests;
