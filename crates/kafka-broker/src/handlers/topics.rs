//! CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).
//!
//! One broker holds every partition, so a replication factor above 1 is refused with
//! `INVALID_REPLICATION_FACTOR`, and manual replica assignments may only name this node.
//! Topic configs go through [`super::configs::apply`]: every setting Kafka 4.1 defines is
//! accepted and checked as Kafka checks it; unknown names, bad values and null values are
//! refused with `INVALID_CONFIG` and a message saying why. From v5 the answer lists every
//! setting of the new topic with its source, as DescribeConfigs does.

use super::configs::{Op, apply, describe_topic};
use super::{Ctx, bs, valid_topic_name};
use crate::store::{NewTopic, StoreError};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsRequest;
use kafka_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use kafka_protocol::messages::create_topics_request::CreateTopicsRequest;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use kafka_protocol::{ErrorCode, Uuid};
use std::collections::HashMap;
use tracing::info;

fn failed(name: &str, code: ErrorCode, message: impl Into<String>) -> CreatableTopicResult {
    CreatableTopicResult {
        name: bs(name),
        error_code: code.code(),
        error_message: Some(bs(message.into())),
        num_partitions: -1,
        replication_factor: -1,
        configs: None,
        ..CreatableTopicResult::default()
    }
}

pub(crate) async fn create_topics(ctx: &Ctx<'_>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let c = &ctx.broker.config;
    let log = &ctx.broker.stores.log;
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in &req.topics {
        *counts.entry(&t.name).or_default() += 1;
    }
    let mut results = Vec::with_capacity(req.topics.len());
    for (i, t) in req.topics.iter().enumerate() {
        let name: &str = &t.name;
        if i >= c.limits.max_topics_per_request {
            results.push(failed(
                name,
                ErrorCode::POLICY_VIOLATION,
                "too many topics in one request",
            ));
            continue;
        }
        if counts.get(name).copied().unwrap_or(0) > 1 {
            results.push(failed(
                name,
                ErrorCode::INVALID_REQUEST,
                "topic named more than once in the request",
            ));
            continue;
        }
        if let Err(why) = valid_topic_name(name) {
            results.push(failed(name, ErrorCode::INVALID_TOPIC_EXCEPTION, why));
            continue;
        }
        let partitions = if !t.assignments.is_empty() {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                results.push(failed(
                    name,
                    ErrorCode::INVALID_REQUEST,
                    "give either assignments or partitions and replication factor",
                ));
                continue;
            }
            let mut seen: Vec<i32> = t.assignments.iter().map(|a| a.partition_index).collect();
            seen.sort_unstable();
            let contiguous = seen.iter().enumerate().all(|(i, p)| *p == i as i32);
            let on_this_node = t.assignments.iter().all(|a| a.broker_ids == [c.node_id]);
            if !contiguous || !on_this_node {
                results.push(failed(
                    name,
                    ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "partitions must be 0..n, each on broker {} alone",
                        c.node_id
                    ),
                ));
                continue;
            }
            t.assignments.len() as i32
        } else {
            if t.replication_factor != -1 && t.replication_factor != 1 {
                results.push(failed(
                    name,
                    ErrorCode::INVALID_REPLICATION_FACTOR,
                    format!(
                        "replication factor {} is larger than the 1 available broker",
                        t.replication_factor
                    ),
                ));
                continue;
            }
            match t.num_partitions {
                -1 => c.auto_create_partitions,
                n if n < 1 => {
                    results.push(failed(
                        name,
                        ErrorCode::INVALID_PARTITIONS,
                        "number of partitions must be at least 1",
                    ));
                    continue;
                }
                n => n,
            }
        };
        if partitions > c.limits.max_partitions_per_topic {
            results.push(failed(
                name,
                ErrorCode::INVALID_PARTITIONS,
                format!(
                    "at most {} partitions per topic",
                    c.limits.max_partitions_per_topic
                ),
            ));
            continue;
        }
        if let Some(e) = t.configs.iter().find(|e| e.value.is_none()) {
            results.push(failed(
                name,
                ErrorCode::INVALID_CONFIG,
                format!(
                    "{}: a null value is not accepted for topic configs",
                    &*e.name
                ),
            ));
            continue;
        }
        let mut base = c.default_topic_config.clone();
        base.overrides.clear();
        let config = match apply(
            &c.default_topic_config,
            base,
            t.configs
                .iter()
                .map(|e| (&*e.name, Op::Set(e.value.as_deref().unwrap_or_default()))),
        ) {
            Ok(cfg) => cfg,
            Err((code, msg)) => {
                results.push(failed(name, code, msg));
                continue;
            }
        };
        let new = NewTopic {
            name: name.to_string(),
            partitions,
            config,
        };
        match log.create_topic(new, req.validate_only).await {
            Ok(info) => {
                if !req.validate_only {
                    info!(topic = name, partitions, "topic created");
                }
                results.push(CreatableTopicResult {
                    name: bs(name),
                    topic_id: if req.validate_only {
                        Uuid::ZERO
                    } else {
                        Uuid::from_u128(info.id)
                    },
                    error_code: ErrorCode::NONE.code(),
                    error_message: None,
                    num_partitions: info.partitions,
                    replication_factor: 1,
                    configs: Some(
                        describe_topic(&info.config, &c.default_topic_config)
                            .into_iter()
                            .map(|e| CreatableTopicConfigs {
                                name: bs(e.name),
                                value: Some(bs(e.value)),
                                read_only: e.read_only,
                                config_source: e.source,
                                is_sensitive: e.kind
                                    == crate::store::topic_config::registry::ConfigType::Password,
                                ..CreatableTopicConfigs::default()
                            })
                            .collect(),
                    ),
                    ..CreatableTopicResult::default()
                });
            }
            Err(e) => results.push(failed(name, e.error_code(), e.to_string())),
        }
    }
    CreateTopicsResponse {
        topics: results,
        ..CreateTopicsResponse::default()
    }
}

pub(crate) async fn delete_topics(ctx: &Ctx<'_>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let log = &ctx.broker.stores.log;
    // v0-5 name topics in `topic_names`; v6 uses `topics` with a name or an id.
    let targets: Vec<(Option<String>, Uuid)> = if ctx.version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_deref().map(str::to_string), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.to_string()), Uuid::ZERO))
            .collect()
    };
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let found = match &name {
            Some(n) => log.topic(n).await,
            None => log.topic_by_id(id.as_u128()).await,
        };
        let result = match found {
            Ok(Some(info)) => match log.delete_topic(&info.name).await {
                Ok(()) => {
                    ctx.broker.producers.forget_topic(&info.name);
                    ctx.broker.txn_partitions.forget_topic(&info.name);
                    info!(topic = %info.name, "topic deleted");
                    DeletableTopicResult {
                        name: Some(bs(info.name.clone())),
                        topic_id: Uuid::from_u128(info.id),
                        error_code: ErrorCode::NONE.code(),
                        ..DeletableTopicResult::default()
                    }
                }
                Err(e) => DeletableTopicResult {
                    name: Some(bs(info.name.clone())),
                    topic_id: Uuid::from_u128(info.id),
                    error_code: e.error_code().code(),
                    error_message: Some(bs(e.to_string())),
                    ..DeletableTopicResult::default()
                },
            },
            Ok(None) => DeletableTopicResult {
                name: name.clone().map(bs),
                topic_id: id,
                error_code: if name.is_some() {
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
                } else {
                    ErrorCode::UNKNOWN_TOPIC_ID.code()
                },
                ..DeletableTopicResult::default()
            },
            Err(e) => DeletableTopicResult {
                name: name.clone().map(bs),
                topic_id: id,
                error_code: e.error_code().code(),
                error_message: Some(bs(e.to_string())),
                ..DeletableTopicResult::default()
            },
        };
        // Before v5 there is no error message field, and the name is not nullable.
        let result = if ctx.version < 5 {
            DeletableTopicResult {
                error_message: None,
                name: Some(result.name.unwrap_or_default()),
                ..result
            }
        } else {
            result
        };
        responses.push(result);
    }
    DeleteTopicsResponse {
        responses,
        ..DeleteTopicsResponse::default()
    }
}

pub(crate) async fn create_partitions(
    ctx: &Ctx<'_>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let c = &ctx.broker.config;
    let log = &ctx.broker.stores.log;
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name: &str = &t.name;
        let outcome: Result<(), (ErrorCode, String)> = async {
            if t.count > c.limits.max_partitions_per_topic {
                return Err((
                    ErrorCode::INVALID_PARTITIONS,
                    format!(
                        "at most {} partitions per topic",
                        c.limits.max_partitions_per_topic
                    ),
                ));
            }
            if let Some(a) = &t.assignments
                && !a.iter().all(|x| x.broker_ids == [c.node_id])
            {
                return Err((
                    ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                    format!("new partitions can only be on broker {}", c.node_id),
                ));
            }
            log.create_partitions(name, t.count, req.validate_only)
                .await
                .map_err(|e| match e {
                    StoreError::InvalidPartitions(m) => (ErrorCode::INVALID_PARTITIONS, m),
                    other => (other.error_code(), other.to_string()),
                })
        }
        .await;
        results.push(match outcome {
            Ok(()) => {
                if !req.validate_only {
                    info!(topic = name, total = t.count, "partitions added");
                }
                CreatePartitionsTopicResult {
                    name: bs(name),
                    error_code: ErrorCode::NONE.code(),
                    error_message: None,
                    ..CreatePartitionsTopicResult::default()
                }
            }
            Err((code, msg)) => CreatePartitionsTopicResult {
                name: bs(name),
                error_code: code.code(),
                error_message: Some(bs(msg)),
                ..CreatePartitionsTopicResult::default()
            },
        });
    }
    CreatePartitionsResponse {
        results,
        ..CreatePartitionsResponse::default()
    }
}
