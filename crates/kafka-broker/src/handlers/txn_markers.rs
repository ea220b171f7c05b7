//! WriteTxnMarkers (key 27): a transaction coordinator on another gateway asks this one,
//! the leader of the partitions, to close a transaction in them.
//!
//! Per marker and partition: a topic partition this gateway leads gets the marker
//! written ([`crate::txns::partitions::TxnPartitions::write_marker`]: its code, `NONE`
//! when nothing was open there); one led elsewhere `NOT_LEADER_OR_FOLLOWER` (the
//! coordinator routes it again); an unknown one `UNKNOWN_TOPIC_OR_PARTITION`. The
//! partition `(__consumer_offsets, shard)` stands for the offsets a transaction
//! committed through the group coordinator of that shard: where this gateway
//! coordinates the shard they become committed (or are dropped), else
//! `NOT_COORDINATOR`. Only version 1 is served; the number of partitions one request may
//! name is capped with the other entry caps ([`super::caps`]). Authorization
//! (ClusterAction on the cluster) is the pipeline's.

use super::Ctx;
use crate::txns::MarkerWrite;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::write_txn_markers_request::WriteTxnMarkersRequest;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
};

pub(crate) async fn handle(ctx: &Ctx<'_>, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let broker = ctx.broker;
    let log = &broker.stores.log;
    let mut markers = Vec::with_capacity(req.markers.len());
    for m in req.markers {
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in m.topics {
            let offsets = &*t.name == kafka_txn::OFFSETS_TOPIC;
            let info = if offsets {
                None
            } else {
                Some(log.topic(&t.name).await)
            };
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for partition in t.partition_indexes {
                let code = if offsets {
                    offsets_marker(ctx, partition, m.producer_id, m.transaction_result).await
                } else {
                    match &info {
                        Some(Ok(Some(info))) if (0..info.partitions).contains(&partition) => {
                            broker
                                .txn_partitions
                                .write_marker(
                                    broker,
                                    &MarkerWrite {
                                        topic: info.name.clone(),
                                        partition,
                                        producer_id: m.producer_id,
                                        producer_epoch: m.producer_epoch,
                                        coordinator_epoch: m.coordinator_epoch,
                                        commit: m.transaction_result,
                                    },
                                )
                                .await
                        }
                        Some(Err(e)) => e.error_code(),
                        _ => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    }
                };
                partitions.push(WritableTxnMarkerPartitionResult {
                    partition_index: partition,
                    error_code: code.code(),
                    ..WritableTxnMarkerPartitionResult::default()
                });
            }
            topics.push(WritableTxnMarkerTopicResult {
                name: t.name,
                partitions,
                ..WritableTxnMarkerTopicResult::default()
            });
        }
        markers.push(WritableTxnMarkerResult {
            producer_id: m.producer_id,
            topics,
            ..WritableTxnMarkerResult::default()
        });
    }
    WriteTxnMarkersResponse {
        markers,
        ..WriteTxnMarkersResponse::default()
    }
}

/// The "marker" of a group shard: the producer's pending transactional offsets there
/// become committed or go.
async fn offsets_marker(ctx: &Ctx<'_>, shard: i32, producer_id: i64, commit: bool) -> ErrorCode {
    let Ok(shard) = u32::try_from(shard) else {
        return ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
    };
    if !ctx.broker.route().coordinates_shard(shard) {
        return ErrorCode::NOT_COORDINATOR;
    }
    ctx.broker
        .groups
        .complete_txn_offsets(shard, producer_id, commit)
        .await
}
