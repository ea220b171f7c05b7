//! DeleteRecords (key 21): move a partition's log start offset forward.

use super::Ctx;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::delete_records_request::DeleteRecordsRequest;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};

pub(crate) async fn delete_records(
    ctx: &Ctx<'_>,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let log = &ctx.broker.stores.log;
    let route = ctx.broker.route();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let info = log.topic(&t.name).await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let result = match &info {
                Ok(Some(i))
                    if p.partition_index >= 0
                        && p.partition_index < i.partitions
                        && !route.leads(&i.name, p.partition_index) =>
                {
                    Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
                }
                Ok(Some(i)) if p.partition_index >= 0 && p.partition_index < i.partitions => log
                    .delete_records(&i.name, p.partition_index, p.offset)
                    .await
                    .map_err(|e| e.error_code()),
                Ok(_) => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                Err(e) => Err(e.error_code()),
            };
            partitions.push(match result {
                Ok(low) => DeleteRecordsPartitionResult {
                    partition_index: p.partition_index,
                    low_watermark: low,
                    error_code: ErrorCode::NONE.code(),
                    ..DeleteRecordsPartitionResult::default()
                },
                Err(code) => DeleteRecordsPartitionResult {
                    partition_index: p.partition_index,
                    low_watermark: -1,
                    error_code: code.code(),
                    ..DeleteRecordsPartitionResult::default()
                },
            });
        }
        topics.push(DeleteRecordsTopicResult {
            name: t.name,
            partitions,
            ..DeleteRecordsTopicResult::default()
        });
    }
    DeleteRecordsResponse {
        topics,
        ..DeleteRecordsResponse::default()
    }
}
