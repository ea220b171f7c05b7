//! Fetch (key 1): read record batches, waiting for data up to `max_wait_ms`.
//!
//! Sizes: `partition_max_bytes` per partition and `max_bytes` for the response (capped by
//! the broker's own limit), except that the first batch of the first partition with data
//! is returned whole even when larger, so a consumer can always make progress (KIP-74).
//!
//! Long poll: when fewer than `min_bytes` are available, the handler waits on the store's
//! per-partition watermark notifications (no sleeping loop), re-reading on each append,
//! until `min_bytes` is reached or the wait ends. Backends that cannot notify, or whose
//! notifications miss other writers' appends, are (also) re-read at their poll interval.
//!
//! Fetch sessions (KIP-227) are declined: responses carry session id 0, so clients keep
//! sending full fetch requests; an incremental request gets `FETCH_SESSION_ID_NOT_FOUND`,
//! which makes the client start over with a full one.
//!
//! Only the partition's leader reads it (see [`crate::cluster`]); elsewhere it gets
//! `NOT_LEADER_OR_FOLLOWER` with the leader named, for clients that can use the hint
//! (see [`read_all`]).
//!
//! Transactions: `last_stable_offset` is the partition's last stable offset (LSO, see
//! [`crate::txns::partitions`]) at both isolation levels (the high watermark while this
//! gateway has not loaded the partition's transaction index). With `isolation_level=1`
//! (read_committed) the index is loaded first, batches at or past the LSO are left out
//! (a fetch at or past it answers no records, not an error), `aborted_transactions`
//! lists the aborted transactions overlapping the returned records, and a waiting fetch
//! counts only data below the LSO (a marker's append wakes it like any append).
//!
//! A partition named more than once is fetched once, as Kafka's map of fetch data does:
//! it keeps its first place and its last fetch position; a topic named more than once has
//! its partitions merged into its first entry. The number of entries is capped before
//! anything is looked up (see [`super::caps`]).

use super::metadata::{hinted_endpoints, leader_hint};
use super::{Ctx, bs};
use crate::cluster::Route;
use crate::store::{StoreError, TopicInfo};
use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use kafka_protocol::{ErrorCode, RecordSet, Uuid};
use kafka_records::{BATCH_HEADER_LEN, BatchHeader};
use kafka_store::txn_index::AbortedTxn;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

struct Target {
    name: bytestring::ByteString,
    id: Uuid,
    info: Result<TopicInfo, ErrorCode>,
    partitions: Vec<FetchPartition>,
}

pub(crate) async fn handle(ctx: &Ctx<'_>, req: FetchRequest) -> FetchResponse {
    let limits = &ctx.broker.config.limits;
    if ctx.version >= 7 && req.session_epoch > 0 {
        return FetchResponse {
            error_code: ErrorCode::FETCH_SESSION_ID_NOT_FOUND.code(),
            session_id: 0,
            ..FetchResponse::default()
        };
    }
    let log = &ctx.broker.stores.log;
    let by_id = ctx.version >= 13;
    let topics = dedupe(req.topics, by_id);
    let mut targets = Vec::with_capacity(topics.len());
    for t in topics {
        let found = if by_id {
            log.topic_by_id(t.topic_id.as_u128()).await
        } else {
            log.topic(&t.topic).await
        };
        let info = match found {
            Ok(Some(i)) => Ok(i),
            Ok(None) if by_id => Err(ErrorCode::UNKNOWN_TOPIC_ID),
            Ok(None) => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            Err(e) => Err(e.error_code()),
        };
        targets.push(Target {
            name: t.topic,
            id: t.topic_id,
            info,
            partitions: t.partitions,
        });
    }

    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0))
        .min(limits.max_fetch_wait);
    let deadline = Instant::now() + wait;
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let max_bytes = usize::try_from(req.max_bytes)
        .unwrap_or(0)
        .min(limits.max_fetch_response_bytes);

    // Subscribe before reading, so an append between the read and the wait is not missed.
    let mut watchers: Vec<watch::Receiver<i64>> = Vec::new();
    for t in &targets {
        if let Ok(info) = &t.info {
            for p in &t.partitions {
                if let Some(mut rx) = log.watch(&info.name, p.partition) {
                    rx.borrow_and_update();
                    watchers.push(rx);
                }
            }
        }
    }
    loop {
        let pass = read_all(ctx, &targets, max_bytes, req.isolation_level).await;
        let now = Instant::now();
        if pass.total >= min_bytes.max(1) || pass.errors || wait.is_zero() || now >= deadline {
            return FetchResponse {
                error_code: ErrorCode::NONE.code(),
                session_id: 0,
                responses: pass.responses,
                node_endpoints: pass.node_endpoints,
                ..FetchResponse::default()
            };
        }
        let remaining = deadline - now;
        if watchers.is_empty() {
            tokio::time::sleep(log.poll_interval().min(remaining)).await;
            continue;
        }
        let bound = if log.notifies_every_append() {
            remaining
        } else {
            log.poll_interval().min(remaining)
        };
        let closed = {
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            match tokio::time::timeout(bound, changed).await {
                // A sender went away (topic deleted): stop waiting on that channel.
                Ok((Err(_), idx, _)) => Some(idx),
                Ok((Ok(()), _, _)) | Err(_) => None,
            }
        };
        if let Some(idx) = closed {
            watchers.swap_remove(idx);
        }
    }
}

/// What one pass over the requested partitions gave.
struct Pass {
    responses: Vec<FetchableTopicResponse>,
    /// Bytes of records gathered.
    total: usize,
    /// Whether any partition reported an error (which ends the wait, as in Kafka).
    errors: bool,
    /// The addresses of the leaders named in `current_leader` hints (v16+).
    node_endpoints: Vec<NodeEndpoint>,
}

/// One pass over every requested partition, deciding leadership with one snapshot of
/// the view.
///
/// A partition another gateway leads gets `NOT_LEADER_OR_FOLLOWER` and, from v12, that
/// gateway in `current_leader` (leader epoch 0, as Metadata says); from v16 the response
/// also carries each such leader's address for the request's listener in
/// `node_endpoints`, so a client can go there without asking for Metadata first
/// (KIP-951). A gateway that holds no lease names no leader it does not know better than
/// the view: when the view places the partition on itself, no hint is given.
///
/// When the partitions' limits add up to no more than `max_bytes`, the response budget
/// cannot run out before the last partition, so the partitions are read concurrently
/// (a remote backend answers them in parallel instead of one round trip after the
/// other); otherwise one after the other, each with what is left of the budget, so a
/// request never makes the broker hold more than `max_bytes` of reads. Either way the
/// results are then sized in request order with the same rules.
async fn read_all(
    ctx: &Ctx<'_>,
    targets: &[Target],
    max_bytes: usize,
    isolation_level: i8,
) -> Pass {
    let route = ctx.broker.route();
    let wanted: usize = targets
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            usize::try_from(p.partition_max_bytes)
                .unwrap_or(0)
                .min(max_bytes)
        })
        .fold(0usize, usize::saturating_add);
    let concurrent = wanted <= max_bytes;
    let mut reads: Vec<Vec<Read>> = Vec::with_capacity(targets.len());
    if concurrent {
        let all = targets.iter().map(|t| {
            futures_util::future::join_all(t.partitions.iter().map(|p| {
                let limit = usize::try_from(p.partition_max_bytes).unwrap_or(0);
                read_one(
                    ctx,
                    &route,
                    t,
                    p,
                    limit.min(max_bytes),
                    false,
                    isolation_level,
                )
            }))
        });
        reads = futures_util::future::join_all(all).await;
    }

    let mut total = 0usize;
    let mut errors = false;
    let mut hinted: BTreeSet<i32> = BTreeSet::new();
    let mut out = Vec::with_capacity(targets.len());
    for (ti, t) in targets.iter().enumerate() {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for (pi, p) in t.partitions.iter().enumerate() {
            let budget = max_bytes.saturating_sub(total);
            let part_max = usize::try_from(p.partition_max_bytes).unwrap_or(0);
            let limit = part_max.min(budget);
            let read = match reads.get_mut(ti).and_then(|r| r.get_mut(pi)) {
                Some(r) => std::mem::take(r),
                None => {
                    read_one(
                        ctx,
                        &route,
                        t,
                        p,
                        limit,
                        total > 0 && limit == 0,
                        isolation_level,
                    )
                    .await
                }
            };
            let mut data = PartitionData {
                partition_index: p.partition,
                error_code: ErrorCode::NONE.code(),
                high_watermark: read.high_watermark,
                last_stable_offset: read.last_stable_offset,
                log_start_offset: read.log_start_offset,
                aborted_transactions: (isolation_level == 1).then(|| {
                    read.aborted
                        .iter()
                        .map(|a| AbortedTransaction {
                            producer_id: a.producer_id,
                            first_offset: a.first_offset,
                            ..AbortedTransaction::default()
                        })
                        .collect()
                }),
                preferred_read_replica: -1,
                records: Some(RecordSet::new()),
                ..PartitionData::default()
            };
            let result = read.result.and_then(|mut batches| {
                // Only the very first data of the response may exceed the limits.
                if total > 0 {
                    let mut used = 0;
                    batches.retain(|b| {
                        used += b.len();
                        used <= limit
                    });
                }
                if ctx.version < 10 && batches.iter().any(is_zstd) {
                    return Err(ErrorCode::UNSUPPORTED_COMPRESSION_TYPE);
                }
                Ok(batches)
            });
            match result {
                Ok(batches) => {
                    let records: RecordSet = batches.into_iter().collect();
                    total += records.len();
                    data.records = Some(records);
                }
                Err(code) => {
                    errors = true;
                    data.error_code = code.code();
                    if code == ErrorCode::NOT_LEADER_OR_FOLLOWER
                        && ctx.version >= 12
                        && let Ok(info) = &t.info
                        && let Some(node) = leader_hint(&route, &info.name, p.partition)
                    {
                        data.current_leader = LeaderIdAndEpoch {
                            leader_id: node,
                            leader_epoch: 0,
                            ..LeaderIdAndEpoch::default()
                        };
                        hinted.insert(node);
                    }
                }
            }
            partitions.push(data);
        }
        out.push(FetchableTopicResponse {
            topic: if ctx.version >= 13 {
                Default::default()
            } else {
                t.name.clone()
            },
            topic_id: if ctx.version >= 13 { t.id } else { Uuid::ZERO },
            partitions,
            ..FetchableTopicResponse::default()
        });
    }
    let node_endpoints = if ctx.version >= 16 && !hinted.is_empty() {
        hinted_endpoints(ctx, &route, &hinted)
            .map(|(node_id, host, port)| NodeEndpoint {
                node_id,
                host: bs(host),
                port: i32::from(port),
                rack: None,
                ..NodeEndpoint::default()
            })
            .collect()
    } else {
        Vec::new()
    };
    Pass {
        responses: out,
        total,
        errors,
        node_endpoints,
    }
}

/// What one partition read gave: watermarks (-1 when unknown) and its batches or error.
struct Read {
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    /// Aborted transactions overlapping the batches (read_committed).
    aborted: Vec<AbortedTxn>,
    result: Result<Vec<Bytes>, ErrorCode>,
}

impl Default for Read {
    fn default() -> Self {
        Read {
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted: Vec::new(),
            result: Ok(Vec::new()),
        }
    }
}

/// Reads up to `limit` bytes of one partition (at least one batch, KIP-74), or only its
/// watermarks when `watermarks_only`; read_committed (`isolation_level` 1) stops at the
/// last stable offset.
async fn read_one(
    ctx: &Ctx<'_>,
    route: &Route,
    t: &Target,
    p: &FetchPartition,
    limit: usize,
    watermarks_only: bool,
    isolation_level: i8,
) -> Read {
    let mut out = read_log(ctx, route, t, p, limit, watermarks_only, isolation_level).await;
    let Ok(info) = &t.info else {
        return out;
    };
    if let Err(code) = &out.result {
        tracing::debug!(topic = %info.name, partition = p.partition, offset = p.fetch_offset, code = %code, "fetch of a partition refused");
    }
    let parts = &ctx.broker.txn_partitions;
    let hw = out.high_watermark;
    if isolation_level != 1 || hw < 0 || out.result.is_err() {
        out.last_stable_offset = if hw >= 0 {
            parts.lso(&info.name, p.partition, hw)
        } else {
            hw
        };
        return out;
    }
    let mut batches = std::mem::replace(&mut out.result, Ok(Vec::new())).unwrap_or_default();
    // Batches come in offset order: everything from the first at or past the LSO goes.
    let stable = parts.stable_read(&info.name, p.partition, hw, p.fetch_offset, |lso| {
        let keep = batches
            .iter()
            .position(|b| header(b).is_none_or(|h| h.base_offset >= lso))
            .unwrap_or(batches.len());
        batches.truncate(keep);
        batches.last().and_then(header).map(|h| h.next_offset())
    });
    match stable {
        Some((lso, aborted)) => {
            out.last_stable_offset = lso;
            out.aborted = aborted;
            out.result = Ok(batches);
        }
        // The partition moved while it was read: the index that said what is open and
        // aborted is gone, so nothing is answered from it.
        None => {
            tracing::debug!(topic = %info.name, partition = p.partition, "read_committed fetch: the partition's index went while it was read");
            out.result = Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
    }
    out
}

fn header(batch: &Bytes) -> Option<BatchHeader> {
    BatchHeader::parse(batch.get(..BATCH_HEADER_LEN)?).ok()
}

/// [`read_one`] up to the store's answer: for read_committed the partition's transaction
/// index is made current first.
async fn read_log(
    ctx: &Ctx<'_>,
    route: &Route,
    t: &Target,
    p: &FetchPartition,
    limit: usize,
    watermarks_only: bool,
    isolation_level: i8,
) -> Read {
    let log = &ctx.broker.stores.log;
    let mut out = Read::default();
    let info = match &t.info {
        Ok(info) => info,
        Err(code) => {
            out.result = Err(*code);
            return out;
        }
    };
    if p.partition < 0 || p.partition >= info.partitions {
        out.result = Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        return out;
    }
    // Another gateway leads it (or this one holds no lease): nothing is read.
    if !route.leads(&info.name, p.partition) {
        out.result = Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        return out;
    }
    if ctx.version >= 9 && p.current_leader_epoch > 0 {
        out.result = Err(ErrorCode::UNKNOWN_LEADER_EPOCH);
        return out;
    }
    if isolation_level == 1
        && let Err(code) = ctx
            .broker
            .txn_partitions
            .ensure_ready(ctx.broker, &info.name, p.partition)
            .await
    {
        out.result = Err(code);
        return out;
    }
    if watermarks_only {
        match log.watermarks(&info.name, p.partition).await {
            Ok(w) => {
                out.high_watermark = w.high_watermark;
                out.log_start_offset = w.log_start_offset;
            }
            Err(e) => out.result = Err(e.error_code()),
        }
        return out;
    }
    match log
        .read(&info.name, p.partition, p.fetch_offset, limit.max(1))
        .await
    {
        Ok(r) => {
            out.high_watermark = r.watermarks.high_watermark;
            out.log_start_offset = r.watermarks.log_start_offset;
            out.result = Ok(r.batches);
        }
        Err(StoreError::OffsetOutOfRange {
            log_start_offset,
            high_watermark,
            ..
        }) => {
            out.high_watermark = high_watermark;
            out.log_start_offset = log_start_offset;
            out.result = Err(ErrorCode::OFFSET_OUT_OF_RANGE);
        }
        Err(e) => out.result = Err(e.error_code()),
    }
    out
}

fn is_zstd(batch: &Bytes) -> bool {
    // attributes: int16 at byte 21, codec in the low three bits.
    batch.get(22).is_some_and(|a| a & 0x07 == 4)
}

/// Merges repeated topics into their first entry and repeated partitions into their first
/// place, keeping the last request for each partition.
fn dedupe(topics: Vec<FetchTopic>, by_id: bool) -> Vec<FetchTopic> {
    let mut out: Vec<FetchTopic> = Vec::with_capacity(topics.len());
    let mut topic_at: HashMap<(u128, bytestring::ByteString), usize> = HashMap::new();
    let mut partition_at: HashMap<(usize, i32), usize> = HashMap::new();
    for mut t in topics {
        let key = if by_id {
            (t.topic_id.as_u128(), bytestring::ByteString::new())
        } else {
            (0, t.topic.clone())
        };
        let partitions = std::mem::take(&mut t.partitions);
        let ti = *topic_at.entry(key).or_insert_with(|| {
            out.push(t);
            out.len() - 1
        });
        for p in partitions {
            let slot = &mut out[ti].partitions;
            match partition_at.get(&(ti, p.partition)) {
                Some(&pi) => slot[pi] = p,
                None => {
                    partition_at.insert((ti, p.partition), slot.len());
                    slot.push(p);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: &[(i32, i64)]) -> FetchTopic {
        FetchTopic {
            topic: name.into(),
            partitions: partitions
                .iter()
                .map(|&(partition, fetch_offset)| FetchPartition {
                    partition,
                    fetch_offset,
                    ..FetchPartition::default()
                })
                .collect(),
            ..FetchTopic::default()
        }
    }

    fn shape(topics: &[FetchTopic]) -> Vec<(String, Vec<(i32, i64)>)> {
        topics
            .iter()
            .map(|t| {
                (
                    t.topic.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| (p.partition, p.fetch_offset))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn repeated_partitions_are_fetched_once_with_the_last_position() {
        let merged = dedupe(
            vec![
                topic("a", &[(0, 1), (1, 1), (0, 5)]),
                topic("b", &[(0, 2)]),
                topic("a", &[(2, 3), (1, 9)]),
            ],
            false,
        );
        assert_eq!(
            shape(&merged),
            vec![
                ("a".to_string(), vec![(0, 5), (1, 9), (2, 3)]),
                ("b".to_string(), vec![(0, 2)]),
            ]
        );
    }

    #[test]
    fn a_million_copies_of_one_partition_become_one() {
        let copies: Vec<(i32, i64)> = (0..1_000_000).map(|i| (0, i)).collect();
        let merged = dedupe(vec![topic("a", &copies)], false);
        assert_eq!(shape(&merged), vec![("a".to_string(), vec![(0, 999_999)])]);
    }
}
