//! DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).
//!
//! Topic settings the store honours and that can be changed: `retention.ms`,
//! `retention.bytes`, `max.message.bytes`, and `cleanup.policy` (only `delete`: there is
//! no compaction). A few more are shown read-only because they describe how this gateway
//! behaves (`compression.type=producer`, `min.insync.replicas=1`, ...). Any other name is
//! refused with `INVALID_CONFIG` and a message, rather than accepted and ignored.
//! Broker resources are described read-only.

use super::{Ctx, bs};
use crate::store::TopicConfig;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::alter_configs_request::AlterConfigsRequest;
use kafka_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse, AlterConfigsResponse,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsRequest;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse as IncrementalResult, IncrementalAlterConfigsResponse,
};
use tracing::info;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

// Kafka's config sources and types, as DescribeConfigs reports them.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;

/// One described setting.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) read_only: bool,
    pub(crate) source: i8,
    pub(crate) kind: i8,
}

/// A topic's settings as Kafka names them.
pub(crate) fn describe_topic(cfg: &TopicConfig) -> Vec<Entry> {
    let d = TopicConfig::default();
    let src = |changed: bool| {
        if changed {
            SOURCE_DYNAMIC_TOPIC
        } else {
            SOURCE_DEFAULT
        }
    };
    let fixed = |name, value: &str, kind| Entry {
        name,
        value: value.to_string(),
        read_only: true,
        source: SOURCE_DEFAULT,
        kind,
    };
    vec![
        Entry {
            name: "cleanup.policy",
            value: cfg.cleanup_policy.as_str().into(),
            read_only: false,
            source: src(cfg.cleanup_policy != d.cleanup_policy),
            kind: TYPE_LIST,
        },
        Entry {
            name: "compression.type",
            value: cfg.compression_type.as_str().into(),
            read_only: false,
            source: src(cfg.compression_type != d.compression_type),
            kind: TYPE_STRING,
        },
        Entry {
            name: "max.message.bytes",
            value: cfg.max_message_bytes.to_string(),
            read_only: false,
            source: src(cfg.max_message_bytes != d.max_message_bytes),
            kind: TYPE_INT,
        },
        Entry {
            name: "message.timestamp.type",
            value: cfg.message_timestamp_type.as_str().into(),
            read_only: false,
            source: src(cfg.message_timestamp_type != d.message_timestamp_type),
            kind: TYPE_STRING,
        },
        fixed("min.insync.replicas", "1", TYPE_INT),
        Entry {
            name: "retention.bytes",
            value: cfg.retention_bytes.to_string(),
            read_only: false,
            source: src(cfg.retention_bytes != d.retention_bytes),
            kind: TYPE_LONG,
        },
        Entry {
            name: "retention.ms",
            value: cfg.retention_ms.to_string(),
            read_only: false,
            source: src(cfg.retention_ms != d.retention_ms),
            kind: TYPE_LONG,
        },
        fixed("unclean.leader.election.enable", "false", TYPE_BOOLEAN),
    ]
}

fn describe_broker(ctx: &Ctx<'_>) -> Vec<Entry> {
    let c = &ctx.broker.config;
    let e = |name, value: String, kind| Entry {
        name,
        value,
        read_only: true,
        source: SOURCE_STATIC_BROKER,
        kind,
    };
    vec![
        e(
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            TYPE_BOOLEAN,
        ),
        e("broker.id", c.node_id.to_string(), TYPE_INT),
        e(
            "log.retention.ms",
            c.default_topic_config.retention_ms.to_string(),
            TYPE_LONG,
        ),
        e(
            "message.max.bytes",
            c.default_topic_config.max_message_bytes.to_string(),
            TYPE_INT,
        ),
        e(
            "num.partitions",
            c.auto_create_partitions.to_string(),
            TYPE_INT,
        ),
        e(
            "socket.request.max.bytes",
            c.limits.max_frame_size.to_string(),
            TYPE_INT,
        ),
    ]
}

/// Applies `(name, value)` settings on top of `base`. A `None` value resets the setting to
/// its value in `defaults`. Unknown, read-only or out-of-range settings are an error.
pub(crate) fn apply<'a>(
    defaults: &TopicConfig,
    mut base: TopicConfig,
    entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<TopicConfig, (ErrorCode, String)> {
    for (name, value) in entries {
        match name {
            "min.insync.replicas" | "unclean.leader.election.enable" => {
                return Err((
                    ErrorCode::INVALID_CONFIG,
                    format!("{name} is read-only on this gateway"),
                ));
            }
            _ => base
                .set(defaults, name, value)
                .map_err(|e| (ErrorCode::INVALID_CONFIG, e.to_string()))?,
        }
    }
    Ok(base)
}

pub(crate) async fn describe(
    ctx: &Ctx<'_>,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let log = &ctx.broker.stores.log;
    let mut results = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let entries = match r.resource_type {
            RESOURCE_TOPIC => match log.topic(&r.resource_name).await {
                Ok(Some(t)) => Ok(describe_topic(&t.config)),
                Ok(None) => Err((
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    "unknown topic".to_string(),
                )),
                Err(e) => Err((e.error_code(), e.to_string())),
            },
            RESOURCE_BROKER
                if r.resource_name.is_empty()
                    || *r.resource_name == *ctx.broker.config.node_id.to_string() =>
            {
                Ok(describe_broker(ctx))
            }
            RESOURCE_BROKER => Err((
                ErrorCode::INVALID_REQUEST,
                format!("unknown broker {}", &*r.resource_name),
            )),
            other => Err((
                ErrorCode::INVALID_REQUEST,
                format!("resource type {other} is not supported"),
            )),
        };
        results.push(match entries {
            Ok(entries) => DescribeConfigsResult {
                error_code: ErrorCode::NONE.code(),
                error_message: None,
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                configs: entries
                    .into_iter()
                    .filter(|e| match &r.configuration_keys {
                        Some(keys) => keys.iter().any(|k| **k == *e.name),
                        None => true,
                    })
                    .map(|e| DescribeConfigsResourceResult {
                        name: bs(e.name),
                        value: Some(bs(e.value)),
                        read_only: e.read_only,
                        config_source: e.source,
                        is_sensitive: false,
                        synonyms: Vec::new(),
                        config_type: if ctx.version >= 3 { e.kind } else { 0 },
                        documentation: None,
                        ..DescribeConfigsResourceResult::default()
                    })
                    .collect(),
                ..DescribeConfigsResult::default()
            },
            Err((code, msg)) => DescribeConfigsResult {
                error_code: code.code(),
                error_message: Some(bs(msg)),
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                ..DescribeConfigsResult::default()
            },
        });
    }
    DescribeConfigsResponse {
        results,
        ..DescribeConfigsResponse::default()
    }
}

/// Validates and (unless `validate_only`) stores new settings for one resource.
async fn alter_one(
    ctx: &Ctx<'_>,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(TopicConfig) -> Result<TopicConfig, (ErrorCode, String)>,
) -> Result<(), (ErrorCode, String)> {
    let log = &ctx.broker.stores.log;
    match resource_type {
        RESOURCE_TOPIC => {}
        RESOURCE_BROKER => {
            return Err((
                ErrorCode::INVALID_CONFIG,
                "broker configs are read-only on this gateway".into(),
            ));
        }
        other => {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!("resource type {other} is not supported"),
            ));
        }
    }
    let topic = match log.topic(name).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Err((
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "unknown topic".into(),
            ));
        }
        Err(e) => return Err((e.error_code(), e.to_string())),
    };
    let cfg = change(topic.config)?;
    if !validate_only {
        log.set_topic_config(name, cfg.clone())
            .await
            .map_err(|e| (e.error_code(), e.to_string()))?;
        info!(topic = name, ?cfg, "topic config changed");
    }
    Ok(())
}

pub(crate) async fn alter(ctx: &Ctx<'_>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        // AlterConfigs replaces the whole set: what is not named returns to its default.
        let outcome = alter_one(
            ctx,
            r.resource_type,
            &r.resource_name,
            req.validate_only,
            |_| {
                apply(
                    &ctx.broker.config.default_topic_config,
                    ctx.broker.config.default_topic_config.clone(),
                    r.configs.iter().map(|c| (&*c.name, c.value.as_deref())),
                )
            },
        )
        .await;
        let (code, msg) = match outcome {
            Ok(()) => (ErrorCode::NONE, None),
            Err((c, m)) => (c, Some(bs(m))),
        };
        responses.push(AlterConfigsResourceResponse {
            error_code: code.code(),
            error_message: msg,
            resource_type: r.resource_type,
            resource_name: r.resource_name.clone(),
            ..AlterConfigsResourceResponse::default()
        });
    }
    AlterConfigsResponse {
        responses,
        ..AlterConfigsResponse::default()
    }
}

pub(crate) async fn incremental_alter(
    ctx: &Ctx<'_>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let outcome = alter_one(
            ctx,
            r.resource_type,
            &r.resource_name,
            req.validate_only,
            |current| {
                let mut changes = Vec::with_capacity(r.configs.len());
                for c in &r.configs {
                    match c.config_operation {
                        SET => changes.push((&*c.name, c.value.as_deref())),
                        DELETE => changes.push((&*c.name, None)),
                        op => {
                            return Err((
                                ErrorCode::INVALID_CONFIG,
                                format!(
                                    "operation {op} on {} is not supported (only SET and DELETE)",
                                    &*c.name
                                ),
                            ));
                        }
                    }
                }
                apply(&ctx.broker.config.default_topic_config, current, changes)
            },
        )
        .await;
        let (code, msg) = match outcome {
            Ok(()) => (ErrorCode::NONE, None),
            Err((c, m)) => (c, Some(bs(m))),
        };
        responses.push(IncrementalResult {
            error_code: code.code(),
            error_message: msg,
            resource_type: r.resource_type,
            resource_name: r.resource_name.clone(),
            ..IncrementalResult::default()
        });
    }
    IncrementalAlterConfigsResponse {
        responses,
        ..IncrementalAlterConfigsResponse::default()
    }
}
