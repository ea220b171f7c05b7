//! Committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47).
//!
//! Commits are checked against the group's membership first (generation, member id,
//! static instance; the rules live in `kafka-groups`), then per partition (the topic and
//! partition must exist, metadata at most [`MAX_METADATA_BYTES`]), then stored in the
//! offset store, where they outlive the group's members until the retention sweep
//! (`crate::groups`) deletes them. A commit that would make one group too many with
//! offsets gets `COORDINATOR_NOT_AVAILABLE` for every partition. TxnOffsetCommit (28)
//! keeps its offsets pending until the transaction ends; OffsetFetch with
//! `require_stable` answers `UNSTABLE_OFFSET_COMMIT` for partitions that have some.

use super::{Ctx, bs};
use crate::broker::now_ms;
use crate::store::CommittedOffset;
use bytes::Bytes;
use kafka_groups::GroupState;
use kafka_protocol::messages::consumer_protocol_subscription::ConsumerProtocolSubscription;
use kafka_protocol::messages::offset_commit_request::OffsetCommitRequest;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_request::OffsetDeleteRequest;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::wire::{Cx, Decode};
use kafka_protocol::{ErrorCode, Message};
use kafka_store::cluster::group_shard;
use kafka_txn::OFFSETS_TOPIC;
use std::collections::{BTreeMap, HashSet};

/// Largest metadata string accepted with a commit (Kafka's `offset.metadata.max.bytes`).
pub(crate) const MAX_METADATA_BYTES: usize = 4096;

pub(crate) async fn offset_commit(ctx: &Ctx<'_>, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let group = req.group_id.to_string();
    let generation = req.generation_id_or_member_epoch;
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_deref().map(str::to_string);
    let refused = super::groups::refusal(&ctx.broker.route(), &group);
    let check = if let Some(e) = refused {
        Ok(Err(e))
    } else {
        let id = group.clone();
        ctx.broker
            .groups
            .with_group(&group, move |c, now| {
                c.validate_commit(now, &id, generation, &member, instance.as_deref())
            })
            .await
    };
    let now = now_ms();
    let group_error = match check {
        Err(e) | Ok(Err(e)) => Some(e),
        Ok(Ok(())) => None,
    };
    if let Some(e) = group_error {
        tracing::debug!(group = %group, generation, error = %e, "offset commit refused by the group");
    }
    let log = &ctx.broker.stores.log;
    let mut to_store = Vec::new();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let info = log.topic(&t.name).await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let error = if let Some(e) = group_error {
                e
            } else {
                let committed = CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: if ctx.version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p.committed_metadata.as_deref().map(str::to_string),
                    commit_timestamp: now,
                };
                admit_offset(&info, &t.name, p.partition_index, committed, &mut to_store)
            };
            partitions.push(OffsetCommitResponsePartition {
                partition_index: p.partition_index,
                error_code: error.code(),
                ..OffsetCommitResponsePartition::default()
            });
        }
        topics.push(OffsetCommitResponseTopic {
            name: t.name.clone(),
            partitions,
            ..OffsetCommitResponseTopic::default()
        });
    }
    // One group too many with committed offsets: refused (retriable; expiry makes room).
    let stored = if to_store.is_empty() {
        Ok(())
    } else if !ctx.broker.groups.admit_commit(&group, now) {
        tracing::debug!(group = %group, "offset commit refused: too many groups with offsets");
        Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    } else {
        ctx.broker
            .stores
            .offsets
            .commit(&group, to_store)
            .await
            .map_err(|e| e.error_code())
    };
    if let Err(e) = stored {
        // Nothing of this call was stored: every partition that was about to be reports it.
        not_stored(
            topics
                .iter_mut()
                .flat_map(|t| &mut t.partitions)
                .map(|p| &mut p.error_code),
            e,
        );
    }
    OffsetCommitResponse {
        topics,
        ..OffsetCommitResponse::default()
    }
}

/// A group's offsets per topic: per partition the committed offset (if any) and its code.
type Found = Vec<(String, Vec<(i32, Option<CommittedOffset>, ErrorCode)>)>;

/// Checks one partition of a commit against its topic (`info`): existing partition,
/// metadata at most [`MAX_METADATA_BYTES`]; queues it in `to_store` when it passes.
fn admit_offset(
    info: &kafka_store::StoreResult<Option<kafka_store::TopicInfo>>,
    topic: &str,
    partition: i32,
    offset: CommittedOffset,
    to_store: &mut Vec<(String, i32, CommittedOffset)>,
) -> ErrorCode {
    match info {
        Ok(Some(i)) if partition >= 0 && partition < i.partitions => {
            if offset
                .metadata
                .as_ref()
                .is_some_and(|m| m.len() > MAX_METADATA_BYTES)
            {
                ErrorCode::OFFSET_METADATA_TOO_LARGE
            } else {
                to_store.push((topic.to_owned(), partition, offset));
                ErrorCode::NONE
            }
        }
        Ok(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        Err(e) => e.error_code(),
    }
}

/// A store write failed: every partition that was about to be stored reports `e`.
fn not_stored<'a>(codes: impl Iterator<Item = &'a mut i16>, e: ErrorCode) {
    for c in codes {
        if *c == ErrorCode::NONE.code() {
            *c = e.code();
        }
    }
}

/// One group's committed offsets for the requested topics (`None`: every committed one).
/// With `stable` (OffsetFetch v7+ `require_stable`, KIP-447), a partition with offsets
/// pending in an open transaction answers `UNSTABLE_OFFSET_COMMIT` (retriable) instead.
async fn fetch_group(
    ctx: &Ctx<'_>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    stable: bool,
) -> Result<Found, ErrorCode> {
    let found = fetch_committed(ctx, group, topics).await?;
    let pending = if stable {
        ctx.broker.groups.pending_partitions(group)
    } else {
        HashSet::new()
    };
    Ok(found
        .into_iter()
        .map(|(t, ps)| {
            let ps = ps
                .into_iter()
                .map(|(p, o)| {
                    if pending.contains(&(t.clone(), p)) {
                        (p, None, ErrorCode::UNSTABLE_OFFSET_COMMIT)
                    } else {
                        (p, o, ErrorCode::NONE)
                    }
                })
                .collect();
            (t, ps)
        })
        .collect())
}

async fn fetch_committed(
    ctx: &Ctx<'_>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, ErrorCode> {
    if let Some(e) = super::groups::refusal(&ctx.broker.route(), group) {
        return Err(e);
    }
    // Not before the shard is acquired: its offsets may not be current yet.
    ctx.broker.groups.ready(group).await?;
    let offsets = &ctx.broker.stores.offsets;
    match topics {
        None => {
            let all = offsets.fetch_all(group).await.map_err(|e| e.error_code())?;
            let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                BTreeMap::new();
            for (t, p, o) in all {
                by_topic.entry(t).or_default().push((p, Some(o)));
            }
            Ok(by_topic.into_iter().collect())
        }
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (t, parts) in list {
                let mut ps = Vec::with_capacity(parts.len());
                for p in parts {
                    ps.push((
                        p,
                        offsets
                            .fetch(group, &t, p)
                            .await
                            .map_err(|e| e.error_code())?,
                    ));
                }
                out.push((t, ps));
            }
            Ok(out)
        }
    }
}

fn epoch_for(v: i16, o: &Option<CommittedOffset>) -> i32 {
    if v >= 5 {
        o.as_ref().map_or(-1, |o| o.leader_epoch)
    } else {
        -1
    }
}

pub(crate) async fn offset_fetch(ctx: &Ctx<'_>, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let v = ctx.version;
    if v >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let topics = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            groups.push(
                match fetch_group(ctx, &g.group_id, topics, req.require_stable).await {
                    Ok(found) => OffsetFetchResponseGroup {
                        group_id: g.group_id.clone(),
                        topics: found
                            .into_iter()
                            .map(|(t, ps)| OffsetFetchResponseTopics {
                                name: bs(t),
                                partitions: ps
                                    .into_iter()
                                    .map(|(p, o, e)| OffsetFetchResponsePartitions {
                                        partition_index: p,
                                        committed_offset: o.as_ref().map_or(-1, |o| o.offset),
                                        committed_leader_epoch: epoch_for(v, &o),
                                        metadata: Some(bs(o
                                            .and_then(|o| o.metadata)
                                            .unwrap_or_default())),
                                        error_code: e.code(),
                                        ..OffsetFetchResponsePartitions::default()
                                    })
                                    .collect(),
                                ..OffsetFetchResponseTopics::default()
                            })
                            .collect(),
                        error_code: ErrorCode::NONE.code(),
                        ..OffsetFetchResponseGroup::default()
                    },
                    Err(code) => OffsetFetchResponseGroup {
                        group_id: g.group_id.clone(),
                        error_code: code.code(),
                        ..OffsetFetchResponseGroup::default()
                    },
                },
            );
        }
        return OffsetFetchResponse {
            groups,
            ..OffsetFetchResponse::default()
        };
    }
    let topics = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let requested = topics.clone();
    let stable = v >= 7 && req.require_stable;
    match fetch_group(ctx, &req.group_id, topics, stable).await {
        Ok(found) => OffsetFetchResponse {
            topics: found
                .into_iter()
                .map(|(t, ps)| OffsetFetchResponseTopic {
                    name: bs(t),
                    partitions: ps
                        .into_iter()
                        .map(|(p, o, e)| OffsetFetchResponsePartition {
                            partition_index: p,
                            committed_offset: o.as_ref().map_or(-1, |o| o.offset),
                            committed_leader_epoch: epoch_for(v, &o),
                            metadata: Some(bs(o.and_then(|o| o.metadata).unwrap_or_default())),
                            error_code: e.code(),
                            ..OffsetFetchResponsePartition::default()
                        })
                        .collect(),
                    ..OffsetFetchResponseTopic::default()
                })
                .collect(),
            error_code: ErrorCode::NONE.code(),
            ..OffsetFetchResponse::default()
        },
        Err(code) if v >= 2 => OffsetFetchResponse {
            error_code: code.code(),
            ..OffsetFetchResponse::default()
        },
        // Before v2 there is no top-level error: as Kafka does, every requested partition
        // carries it (with offset -1 and empty metadata), and clients read a coordinator
        // error there as the group's.
        Err(code) => OffsetFetchResponse {
            topics: requested
                .unwrap_or_default()
                .into_iter()
                .map(|(t, ps)| OffsetFetchResponseTopic {
                    name: bs(t),
                    partitions: ps
                        .into_iter()
                        .map(|p| OffsetFetchResponsePartition {
                            partition_index: p,
                            committed_offset: -1,
                            committed_leader_epoch: -1,
                            metadata: Some(bs("")),
                            error_code: code.code(),
                            ..OffsetFetchResponsePartition::default()
                        })
                        .collect(),
                    ..OffsetFetchResponseTopic::default()
                })
                .collect(),
            error_code: ErrorCode::NONE.code(),
            ..OffsetFetchResponse::default()
        },
    }
}

/// Topics a consumer-protocol member subscribes to, from its JoinGroup metadata
/// (`version: int16` then the subscription at that version; newer versions are read as
/// the newest known one, as Kafka does for forward compatibility).
pub(crate) fn subscribed_topics(metadata: &Bytes) -> Option<Vec<String>> {
    let version = i16::from_be_bytes([*metadata.first()?, *metadata.get(1)?]);
    if version < 0 {
        return None;
    }
    let v = version.min(ConsumerProtocolSubscription::VERSIONS.max);
    let cx = Cx::new(metadata);
    let (_, sub) = ConsumerProtocolSubscription::decode(&metadata[2..], &cx, v).ok()?;
    Some(sub.topics.iter().map(|t| t.to_string()).collect())
}

pub(crate) async fn offset_delete(ctx: &Ctx<'_>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group = req.group_id.to_string();
    if let Some(e) = super::groups::refusal(&ctx.broker.route(), &group) {
        return OffsetDeleteResponse {
            error_code: e.code(),
            ..OffsetDeleteResponse::default()
        };
    }
    let offsets = &ctx.broker.stores.offsets;
    let desc = {
        let g = group.clone();
        ctx.broker
            .groups
            .with_group(&group, move |c, _| c.describe(&g))
            .await
    };
    let desc = match desc {
        Ok(d) => d,
        Err(e) => {
            return OffsetDeleteResponse {
                error_code: e.code(),
                ..OffsetDeleteResponse::default()
            };
        }
    };
    let has_offsets = offsets
        .fetch_all(&group)
        .await
        .map(|o| !o.is_empty())
        .unwrap_or(false);
    if desc.is_none() && !has_offsets {
        return OffsetDeleteResponse {
            error_code: ErrorCode::GROUP_ID_NOT_FOUND.code(),
            ..OffsetDeleteResponse::default()
        };
    }
    // Offsets of topics the active members subscribe to cannot be deleted. When the group
    // is mid-rebalance the subscriptions are not settled: every topic counts as in use.
    let subscribed: Option<HashSet<String>> = match &desc {
        Some(d)
            if d.state != GroupState::Empty
                && d.state != GroupState::Dead
                && d.protocol_type == "consumer" =>
        {
            let mut all = HashSet::new();
            let mut known = true;
            for m in &d.members {
                match subscribed_topics(&m.metadata) {
                    Some(ts) => all.extend(ts),
                    None => known = false,
                }
            }
            if known && !d.members.is_empty() {
                Some(all)
            } else {
                None
            }
        }
        _ => Some(HashSet::new()),
    };
    let mut topics = Vec::with_capacity(req.topics.len());
    let mut deletable = Vec::new();
    for t in &req.topics {
        let in_use = subscribed.as_ref().is_none_or(|s| s.contains(&*t.name));
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let error = if in_use {
                ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC
            } else {
                deletable.push((t.name.to_string(), p.partition_index));
                ErrorCode::NONE
            };
            partitions.push(OffsetDeleteResponsePartition {
                partition_index: p.partition_index,
                error_code: error.code(),
            });
        }
        topics.push(OffsetDeleteResponseTopic {
            name: t.name.clone(),
            partitions,
        });
    }
    let error = match offsets.delete(&group, &deletable).await {
        Ok(()) => ErrorCode::NONE,
        Err(e) => e.error_code(),
    };
    OffsetDeleteResponse {
        error_code: error.code(),
        topics,
        ..OffsetDeleteResponse::default()
    }
}

/// TxnOffsetCommit (key 28): offsets committed inside a transaction. They are checked
/// like OffsetCommit's (member and generation when given, KIP-447; partitions that
/// exist; metadata size; the groups-with-offsets cap), and the group's shard must be in
/// the producer's ongoing transaction (AddOffsetsToTxn; KIP-890 verification): if not,
/// `TRANSACTION_ABORTABLE` from v4, `INVALID_TXN_STATE` before. Accepted offsets are
/// stored as pending (awaited) and become the group's committed offsets only when the
/// transaction commits (see `crate::groups`).
pub(crate) async fn txn_offset_commit(
    ctx: &Ctx<'_>,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    // Held until the offsets are stored: the transaction cannot complete this group's
    // shard between the verification and the store write.
    let _gate = ctx.broker.groups.txn_commit_gate(&group).await;
    let group_error = txn_commit_group_check(ctx, &req).await;
    if let Some(e) = group_error {
        tracing::debug!(group = %group, error = %e, "transactional offset commit refused");
    }
    let log = &ctx.broker.stores.log;
    let now = now_ms();
    let mut to_store = Vec::new();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let info = log.topic(&t.name).await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let error = if let Some(e) = group_error {
                e
            } else {
                let committed = CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: if v >= 2 { p.committed_leader_epoch } else { -1 },
                    metadata: p.committed_metadata.as_deref().map(str::to_string),
                    commit_timestamp: now,
                };
                admit_offset(&info, &t.name, p.partition_index, committed, &mut to_store)
            };
            partitions.push(TxnOffsetCommitResponsePartition {
                partition_index: p.partition_index,
                error_code: error.code(),
                ..TxnOffsetCommitResponsePartition::default()
            });
        }
        topics.push(TxnOffsetCommitResponseTopic {
            name: t.name.clone(),
            partitions,
            ..TxnOffsetCommitResponseTopic::default()
        });
    }
    let stored = if to_store.is_empty() {
        Ok(())
    } else if !ctx.broker.groups.admit_commit(&group, now) {
        Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    } else {
        ctx.broker
            .groups
            .add_pending_offsets(&group, req.producer_id, to_store)
            .await
    };
    if let Err(e) = stored {
        not_stored(
            topics
                .iter_mut()
                .flat_map(|t| &mut t.partitions)
                .map(|p| &mut p.error_code),
            e,
        );
    }
    TxnOffsetCommitResponse {
        topics,
        ..TxnOffsetCommitResponse::default()
    }
}

/// What refuses a whole TxnOffsetCommit: the group's coordinator, its members, and the
/// transaction (the group's shard must have been added to it).
async fn txn_commit_group_check(ctx: &Ctx<'_>, req: &TxnOffsetCommitRequest) -> Option<ErrorCode> {
    let group = req.group_id.to_string();
    if let Some(e) = super::groups::refusal(&ctx.broker.route(), &group) {
        return Some(e);
    }
    // Member checks only when the producer names a member or a generation (v3+, from
    // the consumer's group metadata); older versions and bare group ids skip them, as
    // Kafka does. A rebalance in progress does not refuse a transactional commit.
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_deref().map(str::to_string);
    let generation = req.generation_id;
    let checked =
        if ctx.version >= 3 && (generation >= 0 || !member.is_empty() || instance.is_some()) {
            let id = group.clone();
            ctx.broker
                .groups
                .with_group(&group, move |c, now| {
                    c.validate_commit(now, &id, generation, &member, instance.as_deref())
                })
                .await
        } else {
            ctx.broker.groups.ready(&group).await.map(Ok)
        };
    match checked {
        Err(e) | Ok(Err(e)) if e != ErrorCode::REBALANCE_IN_PROGRESS => return Some(e),
        _ => {}
    }
    let shard = i32::try_from(group_shard(&group)).unwrap_or(0);
    let id: &str = &req.transactional_id;
    // The transaction's coordinator answers (in process when it is this gateway).
    let verified = {
        use crate::txns::TxnRouter;
        ctx.broker
            .txn_router
            .verify(
                id,
                req.producer_id,
                req.producer_epoch,
                OFFSETS_TOPIC,
                shard,
            )
            .await
    };
    match verified {
        ErrorCode::NONE => None,
        e if e == ErrorCode::PRODUCER_FENCED || e == ErrorCode::INVALID_PRODUCER_EPOCH => {
            Some(ErrorCode::INVALID_PRODUCER_EPOCH)
        }
        // The transaction's coordinator is moving or busy: retriable for every client.
        e if e.is_retriable() || e == ErrorCode::NOT_COORDINATOR => {
            Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        }
        _ if ctx.version >= 4 => Some(ErrorCode::TRANSACTION_ABORTABLE),
        _ => Some(ErrorCode::INVALID_TXN_STATE),
    }
}
