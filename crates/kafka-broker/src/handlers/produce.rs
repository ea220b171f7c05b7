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

use super::{Ctx, bs};
use crate::broker::now_ms;
use crate::producers::{BatchId, Verdict};
use crate::store::{AppendOutcome, TopicInfo};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::{ErrorCode, Uuid};
use kafka_records::{Compression, DecodeLimits, decode_batches, set_partition_leader_epoch};
use std::time::Duration;
use tracing::debug;

type Failure = (ErrorCode, Option<String>);

fn fail(code: ErrorCode, msg: impl Into<String>) -> Failure {
    (code, Some(msg.into()))
}

pub(crate) async fn handle(ctx: &Ctx<'_>, req: ProduceRequest) -> Option<ProduceResponse> {
    let log = &ctx.broker.stores.log;
    let acks = req.acks;
    let now = now_ms();
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
    // Look every topic up once, then write the partitions concurrently: with a backend
    // that answers over the network, one request's partitions would otherwise wait for
    // each other. Each partition still receives its batches in the order sent.
    let mut lookups = Vec::with_capacity(req.topic_data.len());
    for topic in &req.topic_data {
        lookups.push(if ctx.version >= 13 {
            log.topic_by_id(topic.topic_id.as_u128()).await
        } else {
            log.topic(&topic.name).await
        });
    }
    let mut seen = std::collections::HashSet::new();
    let mut repeated = false;
    let mut writes = Vec::new();
    for (t, topic) in req.topic_data.iter().enumerate() {
        for p in &topic.partition_data {
            repeated |= !seen.insert((&*topic.name, topic.topic_id, p.index));
            let lookup = &lookups[t];
            let refuse = &refuse;
            writes.push(async move {
                match (refuse, lookup) {
                    (Some(f), _) => Err(f.clone()),
                    (None, Err(e)) => Err(fail(e.error_code(), e.to_string())),
                    (None, Ok(None)) => Err((unknown, None)),
                    (None, Ok(Some(info))) => {
                        append_partition(ctx, info, p.index, p.records.clone(), now, timeout).await
                    }
                }
            });
        }
    }
    // A partition named twice in one request keeps its entries in request order.
    let mut outcomes = Vec::with_capacity(writes.len());
    if repeated {
        for w in writes {
            outcomes.push(w.await);
        }
    } else {
        outcomes = futures_util::future::join_all(writes).await;
    }
    let mut outcomes = outcomes.into_iter();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let mut partition_responses = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err(fail(ErrorCode::UNKNOWN_SERVER_ERROR, "no outcome")));
            partition_responses.push(match outcome {
                Ok(a) => PartitionProduceResponse {
                    index: p.index,
                    error_code: ErrorCode::NONE.code(),
                    base_offset: a.base_offset,
                    log_append_time_ms: a.log_append_time,
                    log_start_offset: a.log_start_offset,
                    ..PartitionProduceResponse::default()
                },
                Err((code, msg)) => {
                    debug!(peer = %ctx.peer, topic = %topic.name, partition = p.index, %code, ?msg, "produce refused");
                    PartitionProduceResponse {
                        index: p.index,
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
                topic.name
            },
            topic_id: if ctx.version >= 13 {
                topic.topic_id
            } else {
                Uuid::ZERO
            },
            partition_responses,
            ..TopicProduceResponse::default()
        });
    }
    if acks == 0 {
        return None;
    }
    Some(ProduceResponse {
        responses,
        ..ProduceResponse::default()
    })
}

async fn append_partition(
    ctx: &Ctx<'_>,
    topic: &TopicInfo,
    partition: i32,
    records: Option<Bytes>,
    now: i64,
    timeout: Duration,
) -> Result<AppendOutcome, Failure> {
    if partition < 0 || partition >= topic.partitions {
        return Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None));
    }
    let records = records.unwrap_or_default();
    if records.is_empty() {
        return Err(fail(ErrorCode::INVALID_RECORD, "no record batch"));
    }
    let validated = validate(ctx, topic, &records)?;
    let producers = &ctx.broker.producers;
    let log = &ctx.broker.stores.log;
    for (i, (_, id)) in validated.iter().enumerate() {
        match producers.check(&topic.name, partition, *id) {
            Ok(Verdict::Append) => {}
            // A retry of a write that already landed: answer with its offset.
            Ok(Verdict::Duplicate(base_offset)) if validated.len() == 1 && i == 0 => {
                let w = log
                    .watermarks(&topic.name, partition)
                    .await
                    .map_err(|e| fail(e.error_code(), e.to_string()))?;
                return Ok(AppendOutcome {
                    base_offset,
                    log_append_time: -1,
                    log_start_offset: w.log_start_offset,
                });
            }
            Ok(Verdict::Duplicate(_)) => {
                return Err(fail(
                    ErrorCode::DUPLICATE_SEQUENCE_NUMBER,
                    "a retried batch sent together with new ones",
                ));
            }
            Err(code) => return Err((code, None)),
        }
    }
    let ids: Vec<BatchId> = validated.iter().map(|(_, id)| *id).collect();
    let batches = validated.into_iter().map(|(b, _)| b).collect();
    let append = log.append(&topic.name, partition, batches, now);
    let outcome = match tokio::time::timeout(timeout, append).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(fail(e.error_code(), e.to_string())),
        Err(_) => {
            return Err(fail(
                ErrorCode::REQUEST_TIMED_OUT,
                "the store did not confirm the append in time",
            ));
        }
    };
    let mut offset = outcome.base_offset;
    for id in ids {
        producers.record(&topic.name, partition, id, offset);
        offset += i64::from(id.records);
    }
    Ok(outcome)
}

/// Checks every batch and returns them, each stamped with leader epoch 0, ready to append,
/// with their producer identity.
fn validate(
    ctx: &Ctx<'_>,
    topic: &TopicInfo,
    records: &Bytes,
) -> Result<Vec<(Bytes, BatchId)>, Failure> {
    let limits = &ctx.broker.config.limits;
    let decode_limits = DecodeLimits {
        max_decompressed_bytes: limits.max_decompressed_batch_bytes,
        max_records_per_batch: limits.max_records_per_batch,
    };
    let seq = decode_batches(records, &decode_limits)
        .map_err(|e| fail(ErrorCode(e.kafka_error_code()), e.to_string()))?;
    if seq.truncated_tail > 0 {
        return Err(fail(
            ErrorCode::CORRUPT_MESSAGE,
            format!("{} bytes of a partial batch at the end", seq.truncated_tail),
        ));
    }
    let max = usize::try_from(topic.config.max_message_bytes).unwrap_or(0);
    let mut out = Vec::with_capacity(seq.batches.len());
    for batch in &seq.batches {
        if batch.encoded_len() > max {
            return Err(fail(
                ErrorCode::MESSAGE_TOO_LARGE,
                format!(
                    "batch of {} bytes exceeds max.message.bytes {max}",
                    batch.encoded_len()
                ),
            ));
        }
        if batch.is_transactional() || batch.is_control() {
            return Err(fail(
                ErrorCode::UNSUPPORTED_VERSION,
                "transactional and control batches are not supported",
            ));
        }
        if batch.compression() == Compression::Zstd && ctx.version < 7 {
            return Err(fail(
                ErrorCode::UNSUPPORTED_COMPRESSION_TYPE,
                "zstd needs Produce v7 or later",
            ));
        }
        let expected = i64::from(batch.header().record_count);
        let mut count = 0i64;
        let mut iter = batch
            .records()
            .map_err(|e| fail(ErrorCode(e.kafka_error_code()), e.to_string()))?;
        for r in &mut iter {
            r.map_err(|e| fail(ErrorCode(e.kafka_error_code()), e.to_string()))?;
            count += 1;
        }
        if count != expected || i64::from(batch.header().last_offset_delta) != expected - 1 {
            return Err(fail(
                ErrorCode::INVALID_RECORD,
                format!("batch claims {expected} records, holds {count}"),
            ));
        }
        let mut bytes = BytesMut::from(&batch.as_bytes()[..]);
        set_partition_leader_epoch(&mut bytes, 0)
            .map_err(|e| fail(ErrorCode(e.kafka_error_code()), e.to_string()))?;
        let h = batch.header();
        out.push((
            bytes.freeze(),
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
