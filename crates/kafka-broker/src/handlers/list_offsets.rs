//! ListOffsets (key 2): offsets by position or by time.
//!
//! Timestamps: -2 earliest (log start), -1 latest (high watermark), -3 the record with the
//! largest timestamp (KIP-734), -4 earliest local (the same as earliest: nothing is tiered),
//! -5 earliest pending upload (none: -1), and any other value the first record whose
//! timestamp is at least that. Nothing found is offset -1, timestamp -1.

use super::Ctx;
use crate::store::TimestampHit;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::list_offsets_request::ListOffsetsRequest;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};

pub(crate) async fn handle(ctx: &Ctx<'_>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let log = &ctx.broker.stores.log;
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let info = log.topic(&t.name).await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let result: Result<(i64, i64), ErrorCode> = async {
                let info = match &info {
                    Ok(Some(i)) => i,
                    Ok(None) => return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Err(e) => return Err(e.error_code()),
                };
                if p.partition_index < 0 || p.partition_index >= info.partitions {
                    return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
                }
                if ctx.version >= 4 && p.current_leader_epoch > 0 {
                    return Err(ErrorCode::UNKNOWN_LEADER_EPOCH);
                }
                let name = &info.name;
                let hit = |h: Option<TimestampHit>| h.map_or((-1, -1), |h| (h.timestamp, h.offset));
                let err = |e: crate::store::StoreError| e.error_code();
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
                        log.watermarks(name, p.partition_index)
                            .await
                            .map_err(err)?
                            .high_watermark,
                    ),
                    -3 => hit(log
                        .max_timestamp(name, p.partition_index)
                        .await
                        .map_err(err)?),
                    -5 => (-1, -1),
                    ts if ts < 0 => return Err(ErrorCode::INVALID_REQUEST),
                    ts => hit(log
                        .offset_for_timestamp(name, p.partition_index, ts)
                        .await
                        .map_err(err)?),
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
    ListOffsetsResponse {
        topics,
        ..ListOffsetsResponse::default()
    }
}
