//! The transaction coordinator's APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25),
//! EndTxn (26), DescribeTransactions (65) and ListTransactions (66). InitProducerId with
//! a transactional id is in `init_producer_id`.
//!
//! A transactional id is coordinated by the gateway that coordinates the group of the
//! same name (same shard), so FindCoordinator with key type 1 already points clients
//! here. Each request is refused like a group request when this gateway is not the
//! coordinator (`NOT_COORDINATOR`, or `COORDINATOR_NOT_AVAILABLE` without a lease) or
//! the shard is still loading (`COORDINATOR_LOAD_IN_PROGRESS`); otherwise the state
//! machine (`kafka_txn`, driven by [`crate::txns::coordinator`]) decides.
//!
//! AddPartitionsToTxn checks the partitions exist before the machine sees them: a
//! missing one gets `UNKNOWN_TOPIC_OR_PARTITION` and every other partition of the
//! request `OPERATION_NOT_ATTEMPTED`, as Kafka answers. Versions 4+ (sent by brokers,
//! batched by transactional id) with `verify_only` ask whether each partition is in the
//! ongoing transaction, without changing it (KIP-890 verification for another
//! gateway's Produce).

use super::Ctx;
use bytestring::ByteString;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TopicData, TransactionState as DescribedState,
};
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::end_txn_response::EndTxnResponse;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::{
    ListTransactionsResponse, TransactionState as ListedState,
};
use kafka_store::cluster::group_shard;
use kafka_txn::{AddPartitions, EndTxn, OFFSETS_TOPIC, RequestId, TopicPartition, TxnState};

/// Why this gateway does not serve `transactional_id` now (see the module docs), after
/// waiting for its shard's load at most the groups' `load_wait`.
pub(crate) async fn refusal(ctx: &Ctx<'_>, transactional_id: &str) -> Option<ErrorCode> {
    if let Some(e) = super::groups::refusal(&ctx.broker.route(), transactional_id) {
        return Some(e);
    }
    ctx.broker.groups.ready(transactional_id).await.err()
}

/// Per topic the code of each requested partition.
type Codes = Vec<(ByteString, Vec<(i32, ErrorCode)>)>;

fn results(codes: Codes) -> Vec<AddPartitionsToTxnTopicResult> {
    codes
        .into_iter()
        .map(|(name, parts)| AddPartitionsToTxnTopicResult {
            name,
            results_by_partition: parts
                .into_iter()
                .map(|(p, code)| AddPartitionsToTxnPartitionResult {
                    partition_index: p,
                    partition_error_code: code.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

fn all(topics: &[AddPartitionsToTxnTopic], code: ErrorCode) -> Codes {
    topics
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.partitions.iter().map(|p| (*p, code)).collect(),
            )
        })
        .collect()
}

/// Adds the partitions of one transaction (client versions, and v4+ without
/// `verify_only`).
async fn add_one(
    ctx: &Ctx<'_>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
) -> Codes {
    if let Some(e) = refusal(ctx, transactional_id).await {
        return all(topics, e);
    }
    // Existence first: one unknown partition fails the request, the others are not
    // attempted.
    let log = &ctx.broker.stores.log;
    let mut codes: Codes = Vec::with_capacity(topics.len());
    let mut partitions: Vec<TopicPartition> = Vec::new();
    let mut failed = false;
    for t in topics {
        let info = log.topic(&t.name).await;
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let code = match &info {
                Ok(Some(i)) if *p >= 0 && *p < i.partitions => {
                    partitions.push((t.name.to_string(), *p));
                    ErrorCode::NONE
                }
                Ok(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Err(e) => e.error_code(),
            };
            failed |= code != ErrorCode::NONE;
            parts.push((*p, code));
        }
        codes.push((t.name.clone(), parts));
    }
    if failed {
        for (_, parts) in &mut codes {
            for (_, code) in parts.iter_mut() {
                if *code == ErrorCode::NONE {
                    *code = ErrorCode::OPERATION_NOT_ATTEMPTED;
                }
            }
        }
        return codes;
    }
    let code = ctx
        .broker
        .txns
        .add_partitions(AddPartitions {
            request: RequestId(0),
            transactional_id: transactional_id.to_owned(),
            producer_id,
            producer_epoch,
            partitions,
            version: ctx.version,
        })
        .await;
    for (_, parts) in &mut codes {
        for (_, c) in parts.iter_mut() {
            *c = code;
        }
    }
    codes
}

/// Whether each partition is in the ongoing transaction (nothing written).
async fn verify_one(
    ctx: &Ctx<'_>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
) -> Codes {
    if let Some(e) = refusal(ctx, transactional_id).await {
        return all(topics, e);
    }
    let id = transactional_id.to_owned();
    let asked: Vec<(ByteString, Vec<i32>)> = topics
        .iter()
        .map(|t| (t.name.clone(), t.partitions.clone()))
        .collect();
    let answered = ctx
        .broker
        .txns
        .with(move |c, _| {
            asked
                .into_iter()
                .map(|(name, parts)| {
                    let codes = parts
                        .into_iter()
                        .map(|p| {
                            let tp = (name.to_string(), p);
                            (p, c.verify(&id, producer_id, producer_epoch, &tp))
                        })
                        .collect();
                    (name, codes)
                })
                .collect::<Codes>()
        })
        .await;
    answered.unwrap_or_else(|_| all(topics, ErrorCode::COORDINATOR_NOT_AVAILABLE))
}

pub(crate) async fn add_partitions(
    ctx: &Ctx<'_>,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if ctx.version <= 3 {
        let codes = add_one(
            ctx,
            &req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            &req.v3_and_below_topics,
        )
        .await;
        return AddPartitionsToTxnResponse {
            results_by_topic_v3_and_below: results(codes),
            ..Default::default()
        };
    }
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let codes = if t.verify_only {
            verify_one(
                ctx,
                &t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                &t.topics,
            )
            .await
        } else {
            add_one(
                ctx,
                &t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                &t.topics,
            )
            .await
        };
        out.push(AddPartitionsToTxnResult {
            transactional_id: t.transactional_id.clone(),
            topic_results: results(codes),
            ..Default::default()
        });
    }
    AddPartitionsToTxnResponse {
        error_code: ErrorCode::NONE.code(),
        results_by_transaction: out,
        ..Default::default()
    }
}

pub(crate) async fn add_offsets(
    ctx: &Ctx<'_>,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let error = if let Some(e) = refusal(ctx, &req.transactional_id).await {
        e
    } else {
        let shard = group_shard(&req.group_id);
        ctx.broker
            .txns
            .add_partitions(AddPartitions {
                request: RequestId(0),
                transactional_id: req.transactional_id.to_string(),
                producer_id: req.producer_id,
                producer_epoch: req.producer_epoch,
                partitions: vec![(OFFSETS_TOPIC.to_owned(), i32::try_from(shard).unwrap_or(0))],
                version: ctx.version,
            })
            .await
    };
    AddOffsetsToTxnResponse {
        error_code: error.code(),
        ..Default::default()
    }
}

pub(crate) async fn end_txn(ctx: &Ctx<'_>, req: EndTxnRequest) -> EndTxnResponse {
    let error = if let Some(e) = refusal(ctx, &req.transactional_id).await {
        e
    } else {
        ctx.broker
            .txns
            .end_txn(EndTxn {
                request: RequestId(0),
                transactional_id: req.transactional_id.to_string(),
                producer_id: req.producer_id,
                producer_epoch: req.producer_epoch,
                commit: req.committed,
                version: ctx.version,
            })
            .await
    };
    EndTxnResponse {
        error_code: error.code(),
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    }
}

pub(crate) async fn describe_transactions(
    ctx: &Ctx<'_>,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in &req.transactional_ids {
        let failed = |code: ErrorCode| DescribedState {
            error_code: code.code(),
            transactional_id: id.clone(),
            transaction_state: ByteString::from(""),
            transaction_start_time_ms: -1,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        if let Some(e) = refusal(ctx, id).await {
            states.push(failed(e));
            continue;
        }
        let key = id.to_string();
        let found = ctx
            .broker
            .txns
            .with(move |c, _| c.describe(&key).cloned())
            .await
            .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE));
        states.push(match found {
            Ok(m) => {
                let mut topics: Vec<TopicData> = Vec::new();
                // Partitions are sorted by topic: consecutive ones share a topic entry.
                for (topic, partition) in &m.partitions {
                    match topics.last_mut() {
                        Some(t) if *t.topic == **topic => t.partitions.push(*partition),
                        _ => topics.push(TopicData {
                            topic: ByteString::from(topic.clone()),
                            partitions: vec![*partition],
                            ..Default::default()
                        }),
                    }
                }
                DescribedState {
                    error_code: ErrorCode::NONE.code(),
                    transactional_id: id.clone(),
                    transaction_state: ByteString::from(m.state.name()),
                    transaction_timeout_ms: m.timeout_ms,
                    transaction_start_time_ms: m.start_ms,
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    topics,
                    ..Default::default()
                }
            }
            Err(code) => failed(code),
        });
    }
    DescribeTransactionsResponse {
        transaction_states: states,
        ..Default::default()
    }
}

pub(crate) async fn list_transactions(
    ctx: &Ctx<'_>,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let route = ctx.broker.route();
    if !ctx.broker.groups.loaded_all(&route).await {
        return ListTransactionsResponse {
            error_code: ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code(),
            ..Default::default()
        };
    }
    let mut states = Vec::new();
    let mut unknown = Vec::new();
    for name in &req.state_filters {
        match TxnState::parse(name) {
            Some(s) => states.push(s),
            None => unknown.push(name.clone()),
        }
    }
    // Only unknown state names: nothing can match them.
    if states.is_empty() && !unknown.is_empty() {
        return ListTransactionsResponse {
            error_code: ErrorCode::NONE.code(),
            unknown_state_filters: unknown,
            ..Default::default()
        };
    }
    let producer_ids = req.producer_id_filters.clone();
    let min_duration = if ctx.version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    let listed = ctx
        .broker
        .txns
        .with(move |c, now| {
            c.list(now, &states, &producer_ids, min_duration)
                .into_iter()
                .map(|m| ListedState {
                    transactional_id: ByteString::from(m.transactional_id.clone()),
                    producer_id: m.producer_id,
                    transaction_state: ByteString::from(m.state.name()),
                    ..Default::default()
                })
                .collect::<Vec<_>>()
        })
        .await;
    match listed {
        Ok(transaction_states) => ListTransactionsResponse {
            error_code: ErrorCode::NONE.code(),
            unknown_state_filters: unknown,
            transaction_states,
            ..Default::default()
        },
        Err(_) => ListTransactionsResponse {
            error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
            ..Default::default()
        },
    }
}
