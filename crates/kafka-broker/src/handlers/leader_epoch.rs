//! OffsetForLeaderEpoch (key 23): every partition has had one leader, epoch 0, since it was
//! created. A consumer asking for the end of epoch 0 or later gets epoch 0 ending at the
//! high watermark, which is what librdkafka and Java expect after a leader change check;
//! an epoch below 0 is unknown (-1, -1).

use super::Ctx;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderEpochRequest;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};

pub(crate) async fn handle(
    ctx: &Ctx<'_>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let log = &ctx.broker.stores.log;
    let route = ctx.broker.route();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let info = log.topic(&t.topic).await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let result: Result<(i32, i64), ErrorCode> = async {
                let info = match &info {
                    Ok(Some(i)) => i,
                    Ok(None) => return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Err(e) => return Err(e.error_code()),
                };
                if p.partition < 0 || p.partition >= info.partitions {
                    return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
                }
                if !route.leads(&info.name, p.partition) {
                    return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
                }
                if p.current_leader_epoch > 0 {
                    return Err(ErrorCode::UNKNOWN_LEADER_EPOCH);
                }
                if p.leader_epoch < 0 {
                    return Ok((-1, -1));
                }
                let w = log
                    .watermarks(&info.name, p.partition)
                    .await
                    .map_err(|e| e.error_code())?;
                Ok((0, w.high_watermark))
            }
            .await;
            let (code, leader_epoch, end_offset) = match result {
                Ok((e, o)) => (ErrorCode::NONE, e, o),
                Err(c) => (c, -1, -1),
            };
            partitions.push(EpochEndOffset {
                error_code: code.code(),
                partition: p.partition,
                leader_epoch,
                end_offset,
                ..EpochEndOffset::default()
            });
        }
        topics.push(OffsetForLeaderTopicResult {
            topic: t.topic,
            partitions,
            ..OffsetForLeaderTopicResult::default()
        });
    }
    OffsetForLeaderEpochResponse {
        topics,
        ..OffsetForLeaderEpochResponse::default()
    }
}
