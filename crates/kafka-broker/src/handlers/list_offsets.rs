//! ListOffsets (key 2): offsets by position or by time.
//!
//! Timestamps: -2 earliest (log start), -1 latest (high watermark), -3 the record with the
//! largest timestamp (KIP-734), -4 earliest local (the same as earliest: nothing is tiered),
//! -5 earliest pending upload (none: -1), and any other value the first record whose
//! timestamp is at least that. Nothing found is offset -1, timestamp -1.
//!
//! With `isolation_level=1` (read_committed, v2+) the partition's transaction index is
//! loaded first: latest answers the last stable offset, and a timestamp or largest
//! timestamp hit at or past it answers nothing (-1, -1), as Kafka does.
//!
//! A partition named more than once in a request gets `INVALID_REQUEST` for every copy,
//! as Kafka answers duplicate partitions, and is looked up not at all; so do the entries
//! past `max_list_offsets_partitions` (a bound Kafka does not have). Lookups by
//! timestamp (which may decompress a stored batch) run on the validation pool
//! ([`crate::cpu`]), one at a time per request, so a request listing many partitions
//! never holds a connection worker.

use super::Ctx;
use crate::store::{LogStore, StoreResult, TimestampHit};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::list_offsets_request::ListOffsetsRequest;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::debug;

/// A lookup by timestamp (`None`: the largest timestamp), run on the validation pool.
async fn scan(
    ctx: &Ctx<'_>,
    log: &Arc<dyn LogStore>,
    topic: &str,
    partition: i32,
    timestamp: Option<i64>,
) -> StoreResult<Option<TimestampHit>> {
    let log = log.clone();
    let topic = topic.to_string();
    let handle = tokio::runtime::Handle::current();
    ctx.broker
        .cpu
        .run(move || {
            handle.block_on(async move {
                match timestamp {
                    Some(ts) => log.offset_for_timestamp(&topic, partition, ts).await,
                    None => log.max_timestamp(&topic, partition).await,
                }
            })
        })
        .await
        .unwrap_or_else(|| {
            Err(crate::store::StoreError::Internal(
                "the timestamp lookup did not finish".into(),
            ))
        })
}

pub(crate) async fn handle(ctx: &Ctx<'_>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let log = &ctx.broker.stores.log;
    let route = ctx.broker.route();
    let mut named: HashMap<(bytestring::ByteString, i32), u32> = HashMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            let n = named
                .entry((t.name.clone(), p.partition_index))
                .or_default();
            *n = n.saturating_add(1);
        }
    }
    let cap = ctx.broker.config.limits.max_list_offsets_partitions;
    // Entries of the request so far; those from the cap on are refused unlooked.
    let mut entries = 0usize;
    let mut refused = 0usize;
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let info = if entries < cap {
            log.topic(&t.name).await
        } else {
            Ok(None)
        };
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let repeated = named
                .get(&(t.name.clone(), p.partition_index))
                .is_some_and(|n| *n > 1);
            let past_cap = entries >= cap;
            entries += 1;
            refused += usize::from(past_cap);
            let result: Result<(i64, i64), ErrorCode> = async {
                if repeated || past_cap {
                    return Err(ErrorCode::INVALID_REQUEST);
                }
                let info = match &info {
                    Ok(Some(i)) => i,
                    Ok(None) => return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Err(e) => return Err(e.error_code()),
                };
                if p.partition_index < 0 || p.partition_index >= info.partitions {
                    return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
                }
                if !route.leads(&info.name, p.partition_index) {
                    return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
                }
                if ctx.version >= 4 && p.current_leader_epoch > 0 {
                    return Err(ErrorCode::UNKNOWN_LEADER_EPOCH);
                }
                let name = &info.name;
                let err = |e: crate::store::StoreError| e.error_code();
                let committed = ctx.version >= 2 && req.isolation_level == 1;
                let parts = &ctx.broker.txn_partitions;
                if committed {
                    parts
                        .ensure_ready(ctx.broker, name, p.partition_index)
                        .await?;
                }
                // The offsets a read_committed consumer may see end at the LSO.
                // The index gone meanwhile (the partition moved): refused, as not led.
                let stable = |hw: i64| -> Result<i64, ErrorCode> {
                    if committed {
                        parts
                            .lso_held(name, p.partition_index, hw)
                            .ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                    } else {
                        Ok(hw)
                    }
                };
                let hit = |h: Option<TimestampHit>| h.map_or((-1, -1), |h| (h.timestamp, h.offset));
                let visible = async |found: (i64, i64)| -> Result<(i64, i64), ErrorCode> {
                    if !committed || found.1 < 0 {
                        return Ok(found);
                    }
                    let hw = log
                        .watermarks(name, p.partition_index)
                        .await
                        .map_err(err)?
                        .high_watermark;
                    Ok(if found.1 >= stable(hw)? {
                        (-1, -1)
                    } else {
                        found
                    })
                };
                Ok(match p.timestamp {
                    -2 | -4 => (
                        -1,
                        log.watermarks(name, p.partition_index)
                            .await
                            .map_err(err)?
                            .log_start_offset,
                    ),
                    -1 => (
                        -1,
                        stable(
                            log.watermarks(name, p.partition_index)
                                .await
                                .map_err(err)?
                                .high_watermark,
                        )?,
                    ),
                    -3 => {
                        visible(hit(scan(ctx, log, name, p.partition_index, None)
                            .await
                            .map_err(err)?))
                        .await?
                    }
                    -5 => (-1, -1),
                    ts if ts < 0 => return Err(ErrorCode::INVALID_REQUEST),
                    ts => {
                        visible(hit(scan(ctx, log, name, p.partition_index, Some(ts))
                            .await
                            .map_err(err)?))
                        .await?
                    }
                })
            }
            .await;
            partitions.push(match result {
                Ok((timestamp, offset)) => ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error_code: ErrorCode::NONE.code(),
                    timestamp,
                    offset,
                    leader_epoch: if ctx.version >= 4 { 0 } else { -1 },
                    ..ListOffsetsPartitionResponse::default()
                },
                Err(code) => ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error_code: code.code(),
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                    ..ListOffsetsPartitionResponse::default()
                },
            });
        }
        topics.push(ListOffsetsTopicResponse {
            name: t.name,
            partitions,
            ..ListOffsetsTopicResponse::default()
        });
    }
    if refused > 0 {
        debug!(
            refused,
            cap, "ListOffsets: partitions past max_list_offsets_partitions refused"
        );
    }
    ListOffsetsResponse {
        topics,
        ..ListOffsetsResponse::default()
    }
}
