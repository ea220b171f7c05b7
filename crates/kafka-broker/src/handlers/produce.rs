//! Produce (key 0): validate record batches and append them.
//!
//! Every batch is checked before anything is stored: magic 2, CRC-32C, a codec the
//! negotiated version allows (zstd from v7), the decompressed size and record count
//! within limits, each record well-formed, and the batch within the topic's
//! `max.message.bytes`. Errors are per partition, so one bad partition does not fail the
//! others. Versions 0-2 (legacy message sets) are answered `UNSUPPORTED_VERSION` per
//! partition, and so are transactional requests and transactional or control batches:
//! transactions are not supported, and storing such records as ordinary ones would break
//! what the producer was promised. With acks=0 no response is sent.
//!
//! A request goes through three steps, so that the connection can start the next Produce
//! while the store is still confirming this one: [`prepare`] (topic lookups and batch
//! validation; nothing stored), [`submit`] (idempotence checks, then every partition's
//! batches handed to the store with `LogStore::submit`, in request order, which fixes
//! their place) and [`complete`] (wait for the store, record idempotent producers' batches,
//! build the response).

use super::{Ctx, Reply, Step, bs};
use crate::broker::now_ms;
use crate::producers::{BatchId, Verdict};
use crate::store::{AppendOutcome, PendingAppend, TopicInfo, ValidBatch, check_batches};
use bytes::Bytes;
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::{ErrorCode, Uuid};
use kafka_records::{Compression, DecodeLimits};
use std::time::Duration;
use tracing::debug;

type Failure = (ErrorCode, Option<String>);

fn fail(code: ErrorCode, msg: impl Into<String>) -> Failure {
    (code, Some(msg.into()))
}

/// A Produce request checked against the topics, nothing appended yet.
pub(crate) struct Prepared {
    acks: i16,
    timeout: Duration,
    now: i64,
    /// Whether some batch comes from an idempotent producer.
    idempotent: bool,
    /// Whether some partition is named twice.
    repeated: bool,
    topics: Vec<PerTopic<Result<Batches, Failure>>>,
}

/// A topic of the request with something per partition, in request order.
struct PerTopic<T> {
    name: bytestring::ByteString,
    topic_id: Uuid,
    partitions: Vec<(i32, T)>,
}

/// One partition's validated batches.
struct Batches {
    topic: String,
    batches: Vec<(ValidBatch, BatchId)>,
}

impl Prepared {
    /// Whether the request must be complete before the connection's next one is read:
    /// an idempotent producer's next batch is checked against this one's outcome.
    pub(crate) fn exclusive(&self) -> bool {
        self.idempotent
    }
}

/// A Produce request whose appends hold their place in their partitions.
pub(crate) struct Submitted {
    acks: i16,
    timeout: Duration,
    topics: Vec<PerTopic<Pending>>,
}

/// Where one partition's write stands.
enum Pending {
    Failed(Failure),
    /// A retry of a write that already landed.
    Done(AppendOutcome),
    Appending {
        topic: String,
        ids: Vec<BatchId>,
        append: PendingAppend,
    },
}

/// Starts a request: [`prepare`] and [`submit`] now; [`complete`] is the step that
/// completes it later.
pub(crate) async fn start(ctx: Ctx<'_>, req: ProduceRequest) -> Step<'_> {
    let prepared = prepare(&ctx, req).await;
    let exclusive = prepared.exclusive();
    let submitted = submit(&ctx, prepared).await;
    Step::Later {
        reply: Box::pin(async move { complete(&ctx, submitted).await }),
        exclusive,
    }
}

/// Looks the topics up and validates every batch. Nothing is appended.
pub(crate) async fn prepare(ctx: &Ctx<'_>, req: ProduceRequest) -> Prepared {
    let log = &ctx.broker.stores.log;
    let acks = req.acks;
    let refuse: Option<Failure> = if ctx.version < 3 {
        Some(fail(
            ErrorCode::UNSUPPORTED_VERSION,
            "Produce v0-2 (message format v0/v1) is not supported",
        ))
    } else if req.transactional_id.is_some() {
        Some(fail(
            ErrorCode::UNSUPPORTED_VERSION,
            "transactions are not supported",
        ))
    } else if !matches!(acks, -1..=1) {
        Some(fail(
            ErrorCode::INVALID_REQUIRED_ACKS,
            "acks must be -1, 0 or 1",
        ))
    } else {
        None
    };
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0).max(1000));
    let unknown = if ctx.version >= 13 {
        ErrorCode::UNKNOWN_TOPIC_ID
    } else {
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
    };
    let mut seen = std::collections::HashSet::new();
    let mut repeated = false;
    let mut idempotent = false;
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
            repeated |= !seen.insert((topic.name.clone(), topic.topic_id, p.index));
            let checked = match (&refuse, &lookup) {
                (Some(f), _) => Err(f.clone()),
                (None, Err(e)) => Err(fail(e.error_code(), e.to_string())),
                (None, Ok(None)) => Err((unknown, None)),
                (None, Ok(Some(info))) => check_partition(ctx, info, p.index, p.records),
            };
            if let Ok(b) = &checked {
                idempotent |= b.batches.iter().any(|(_, id)| id.producer_id >= 0);
            }
            partitions.push((p.index, checked));
        }
        topics.push(PerTopic {
            name: topic.name,
            topic_id: topic.topic_id,
            partitions,
        });
    }
    Prepared {
        acks,
        timeout,
        now: now_ms(),
        idempotent,
        repeated,
        topics,
    }
}

fn check_partition(
    ctx: &Ctx<'_>,
    topic: &TopicInfo,
    partition: i32,
    records: Option<Bytes>,
) -> Result<Batches, Failure> {
    if partition < 0 || partition >= topic.partitions {
        return Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None));
    }
    let records = records.unwrap_or_default();
    if records.is_empty() {
        return Err(fail(ErrorCode::INVALID_RECORD, "no record batch"));
    }
    Ok(Batches {
        topic: topic.name.clone(),
        batches: validate(ctx, topic, &records)?,
    })
}

/// Checks producer state and hands every partition's batches to the store, in request
/// order. Once this returns, the batches hold their place in their partitions: a later
/// request's batches land after them.
pub(crate) async fn submit(ctx: &Ctx<'_>, prepared: Prepared) -> Submitted {
    let mut topics = Vec::with_capacity(prepared.topics.len());
    for topic in prepared.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for (index, checked) in topic.partitions {
            let pending = match checked {
                Err(f) => Pending::Failed(f),
                Ok(b) => {
                    // A partition named twice: its first entry must be stored (and
                    // recorded) before the second is checked.
                    let in_order =
                        prepared.repeated && b.batches.iter().any(|(_, id)| id.producer_id >= 0);
                    let p = submit_partition(ctx, b, index, prepared.now, prepared.timeout).await;
                    if in_order {
                        settle(ctx, index, p, prepared.timeout).await
                    } else {
                        p
                    }
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
    Submitted {
        acks: prepared.acks,
        timeout: prepared.timeout,
        topics,
    }
}

async fn submit_partition(
    ctx: &Ctx<'_>,
    b: Batches,
    partition: i32,
    now: i64,
    timeout: Duration,
) -> Pending {
    let producers = &ctx.broker.producers;
    let log = &ctx.broker.stores.log;
    let only = b.batches.len() == 1;
    for (i, (_, id)) in b.batches.iter().enumerate() {
        match producers.check(&b.topic, partition, *id) {
            Ok(Verdict::Append) => {}
            // A retry of a write that already landed: answer with its offset.
            Ok(Verdict::Duplicate(base_offset)) if only && i == 0 => {
                return match log.watermarks(&b.topic, partition).await {
                    Ok(w) => Pending::Done(AppendOutcome {
                        base_offset,
                        log_append_time: -1,
                        log_start_offset: w.log_start_offset,
                    }),
                    Err(e) => Pending::Failed(fail(e.error_code(), e.to_string())),
                };
            }
            Ok(Verdict::Duplicate(_)) => {
                return Pending::Failed(fail(
                    ErrorCode::DUPLICATE_SEQUENCE_NUMBER,
                    "a retried batch sent together with new ones",
                ));
            }
            Err(code) => return Pending::Failed((code, None)),
        }
    }
    let ids: Vec<BatchId> = b.batches.iter().map(|(_, id)| *id).collect();
    let batches = b.batches.into_iter().map(|(bytes, _)| bytes).collect();
    match tokio::time::timeout(timeout, log.submit(&b.topic, partition, batches, now)).await {
        Ok(Ok(append)) => Pending::Appending {
            topic: b.topic,
            ids,
            append,
        },
        Ok(Err(e)) => Pending::Failed(fail(e.error_code(), e.to_string())),
        Err(_) => Pending::Failed(timed_out()),
    }
}

fn timed_out() -> Failure {
    fail(
        ErrorCode::REQUEST_TIMED_OUT,
        "the store did not confirm the append in time",
    )
}

/// Waits for one partition's append and records it in the producer state.
async fn settle(ctx: &Ctx<'_>, partition: i32, pending: Pending, timeout: Duration) -> Pending {
    let (topic, ids, append) = match pending {
        Pending::Appending { topic, ids, append } => (topic, ids, append),
        done => return done,
    };
    let outcome = match tokio::time::timeout(timeout, append).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Pending::Failed(fail(e.error_code(), e.to_string())),
        Err(_) => return Pending::Failed(timed_out()),
    };
    let mut offset = outcome.base_offset;
    for id in ids {
        ctx.broker.producers.record(&topic, partition, id, offset);
        offset += i64::from(id.records);
    }
    Pending::Done(outcome)
}

/// Waits for the store to confirm every append and builds the response (not sent for
/// acks=0).
pub(crate) async fn complete(ctx: &Ctx<'_>, submitted: Submitted) -> Reply {
    let timeout = submitted.timeout;
    let mut waits = Vec::new();
    let mut shapes = Vec::with_capacity(submitted.topics.len());
    for PerTopic {
        name,
        topic_id,
        partitions,
    } in submitted.topics
    {
        let mut indexes = Vec::with_capacity(partitions.len());
        for (index, pending) in partitions {
            indexes.push(index);
            waits.push(settle(ctx, index, pending, timeout));
        }
        shapes.push((name, topic_id, indexes));
    }
    let mut outcomes = futures_util::future::join_all(waits).await.into_iter();
    let mut responses = Vec::with_capacity(shapes.len());
    for (name, topic_id, indexes) in shapes {
        let mut partition_responses = Vec::with_capacity(indexes.len());
        for index in indexes {
            let outcome = match outcomes.next() {
                Some(Pending::Done(a)) => Ok(a),
                Some(Pending::Failed(f)) => Err(f),
                _ => Err(fail(ErrorCode::UNKNOWN_SERVER_ERROR, "no outcome")),
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
                Err((code, msg)) => {
                    debug!(topic = %name, partition = index, %code, ?msg, "produce refused");
                    PartitionProduceResponse {
                        index,
                        error_code: code.code(),
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        error_message: if ctx.version >= 8 { msg.map(bs) } else { None },
                        ..PartitionProduceResponse::default()
                    }
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
    let response = ProduceResponse {
        responses,
        ..ProduceResponse::default()
    }
    .into();
    if submitted.acks == 0 {
        Reply::Unsent(response)
    } else {
        Reply::Body(response)
    }
}

/// Checks every batch ([`check_batches`]: CRC, records, counts; once, for the whole way
/// to the store) and the gateway's own rules, and returns them, each stamped with leader
/// epoch 0, ready to append, with their producer identity.
fn validate(
    ctx: &Ctx<'_>,
    topic: &TopicInfo,
    records: &Bytes,
) -> Result<Vec<(ValidBatch, BatchId)>, Failure> {
    let limits = &ctx.broker.config.limits;
    let decode_limits = DecodeLimits {
        max_decompressed_bytes: limits.max_decompressed_batch_bytes,
        max_records_per_batch: limits.max_records_per_batch,
    };
    let checked = check_batches(records, &decode_limits)
        .map_err(|e| fail(e.kafka_error_code(), e.to_string()))?;
    if checked.truncated_tail > 0 {
        return Err(fail(
            ErrorCode::CORRUPT_MESSAGE,
            format!(
                "{} bytes of a partial batch at the end",
                checked.truncated_tail
            ),
        ));
    }
    let max = usize::try_from(topic.config.max_message_bytes).unwrap_or(0);
    let mut out = Vec::with_capacity(checked.batches.len());
    for batch in checked.batches {
        if batch.len() > max {
            return Err(fail(
                ErrorCode::MESSAGE_TOO_LARGE,
                format!(
                    "batch of {} bytes exceeds max.message.bytes {max}",
                    batch.len()
                ),
            ));
        }
        if batch.batch().is_transactional() || batch.batch().is_control() {
            return Err(fail(
                ErrorCode::UNSUPPORTED_VERSION,
                "transactional and control batches are not supported",
            ));
        }
        if batch.batch().compression() == Compression::Zstd && ctx.version < 7 {
            return Err(fail(
                ErrorCode::UNSUPPORTED_COMPRESSION_TYPE,
                "zstd needs Produce v7 or later",
            ));
        }
        let h = *batch.header();
        // Stored batches carry leader epoch 0. Most producers already send 0 (librdkafka
        // does); only the others' batches are copied to be stamped.
        let batch = batch
            .with_leader_epoch(0)
            .map_err(|e| fail(e.kafka_error_code(), e.to_string()))?;
        out.push((
            batch,
            BatchId {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                first_seq: h.base_sequence,
                records: h.record_count,
            },
        ));
    }
    Ok(out)
}
