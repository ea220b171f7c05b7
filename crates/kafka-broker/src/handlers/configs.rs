//! DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).
//!
//! Topics accept every setting Kafka 4.1 defines (the table in
//! [`registry`](crate::store::topic_config::registry)), checked as Kafka checks them and
//! kept in the topic's overrides, which both stores persist. Names Kafka does not define,
//! including the ones Kafka 4.0 dropped, are refused with `INVALID_CONFIG` and a message.
//! Some settings change what the gateway does; the others (segment files, replication,
//! tiered storage) are stored and reported back only: `docs/api-coverage.md` lists which.
//! Two deserve a word: `min.insync.replicas` and `unclean.leader.election.enable` are
//! accepted and stored as Kafka stores them, so topic templates written for a replicated
//! cluster keep working, but the gateway keeps one copy and never refuses an acks=all
//! produce for lack of replicas. `remote.storage.enable=true` is refused: there is no
//! tiered storage.
//!
//! DescribeConfigs lists every setting of a topic with its source: the topic's own
//! override (`DYNAMIC_TOPIC_CONFIG`), a default the gateway's configuration sets
//! (`STATIC_BROKER_CONFIG`, e.g. `default_retention_ms`), or Kafka's default
//! (`DEFAULT_CONFIG`); synonyms in Kafka's order (topic override, broker setting, default)
//! and, from v3, the type and a one-line description. The broker resource shows what the
//! gateway can truthfully report: the broker defaults of every topic setting under their
//! broker names (`log.retention.ms`, `log.cleanup.policy`, `message.max.bytes`, ...) and
//! the gateway's own fixed facts (one replica, partition count, group timeouts). Broker
//! settings come from the gateway's configuration, so altering them is refused with
//! `INVALID_CONFIG`.
//!
//! IncrementalAlterConfigs supports SET, DELETE, and APPEND/SUBTRACT on list settings
//! (`cleanup.policy`, the throttled-replica lists); APPEND/SUBTRACT on anything else is
//! `INVALID_CONFIG`, as in Kafka, and a name given twice in one resource is
//! `INVALID_REQUEST`. AlterConfigs replaces the whole set of overrides. Both honour
//! `validate_only`. Other resource types: `BROKER_LOGGER` (8) describes as an empty list
//! for this broker (its log levels are not Kafka loggers), `CLIENT_METRICS` (16) as an
//! empty subscription, `GROUP` (32) is not supported; altering any of them is
//! `INVALID_REQUEST`.

use super::{Ctx, bs};
use crate::store::TopicConfig;
use crate::store::topic_config::registry::{self, ConfigType, TOPIC_CONFIGS};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::alter_configs_request::AlterConfigsRequest;
use kafka_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse, AlterConfigsResponse,
};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse as IncrementalResult, IncrementalAlterConfigsResponse,
};
use std::collections::HashSet;
use tracing::info;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_CLIENT_METRICS: i8 = 16;
const RESOURCE_GROUP: i8 = 32;

// Kafka's config sources, as DescribeConfigs reports them.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// One synonym of a described setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Synonym {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) source: i8,
}

/// One described setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) read_only: bool,
    pub(crate) source: i8,
    pub(crate) kind: ConfigType,
    pub(crate) doc: &'static str,
    pub(crate) synonyms: Vec<Synonym>,
}

/// Every setting of a topic whose settings are `cfg`, on a gateway whose topic defaults
/// are `defaults`, in name order.
pub(crate) fn describe_topic(cfg: &TopicConfig, defaults: &TopicConfig) -> Vec<Entry> {
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let overridden = cfg.overrides.get(def.name);
            let gateway_set = defaults.differs_from_kafka(def.name);
            let mut synonyms = Vec::with_capacity(3);
            if let Some(v) = overridden {
                synonyms.push(Synonym {
                    name: def.name,
                    value: v.clone(),
                    source: SOURCE_DYNAMIC_TOPIC,
                });
            }
            synonyms.extend(broker_synonyms(def, defaults));
            Entry {
                name: def.name,
                value: cfg.value_of(def.name).unwrap_or_default(),
                read_only: false,
                source: if overridden.is_some() {
                    SOURCE_DYNAMIC_TOPIC
                } else {
                    broker_source(gateway_set)
                },
                kind: def.kind,
                doc: def.doc,
                synonyms,
            }
        })
        .collect()
}

/// Where a setting's value comes from when nothing is named on the topic.
fn broker_source(gateway_set: bool) -> i8 {
    if gateway_set {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

/// The broker-level synonyms of a topic setting: the gateway's own default when its
/// configuration sets one, then Kafka's default, both under the broker name.
fn broker_synonyms(def: &registry::ConfigDef, defaults: &TopicConfig) -> Vec<Synonym> {
    let Some(name) = def.broker_synonyms.first() else {
        return Vec::new();
    };
    let mut synonyms = Vec::with_capacity(2);
    if defaults.differs_from_kafka(def.name) {
        synonyms.push(Synonym {
            name,
            value: defaults.value_of(def.name).unwrap_or_default(),
            source: SOURCE_STATIC_BROKER,
        });
    }
    synonyms.push(Synonym {
        name,
        value: def.default.to_owned(),
        source: SOURCE_DEFAULT,
    });
    synonyms
}

/// The broker's settings the gateway can state truthfully, in name order. All are
/// read-only: they come from the gateway's configuration.
fn describe_broker(ctx: &Ctx<'_>) -> Vec<Entry> {
    let c = &ctx.broker.config;
    let defaults = &c.default_topic_config;
    let fixed = |name, value: String, kind, doc| Entry {
        name,
        value,
        read_only: true,
        source: SOURCE_STATIC_BROKER,
        kind,
        doc,
        synonyms: Vec::new(),
    };
    let ms = |d: std::time::Duration| d.as_millis().to_string();
    let mut entries = vec![
        fixed(
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            ConfigType::Boolean,
            "Whether naming an unknown topic in Metadata or Produce creates it.",
        ),
        fixed(
            "broker.id",
            c.node_id.to_string(),
            ConfigType::Int,
            "This gateway's node id.",
        ),
        fixed(
            "default.replication.factor",
            "1".into(),
            ConfigType::Int,
            "Replicas of a new topic: the gateway keeps one copy (the store handles durability).",
        ),
        fixed(
            "group.initial.rebalance.delay.ms",
            ms(c.groups.initial_rebalance_delay),
            ConfigType::Int,
            "How long a new group waits for more members before its first rebalance.",
        ),
        fixed(
            "group.max.session.timeout.ms",
            ms(c.groups.max_session_timeout),
            ConfigType::Int,
            "Longest session timeout a group member may ask for.",
        ),
        fixed(
            "group.min.session.timeout.ms",
            ms(c.groups.min_session_timeout),
            ConfigType::Int,
            "Shortest session timeout a group member may ask for.",
        ),
        fixed(
            "node.id",
            c.node_id.to_string(),
            ConfigType::Int,
            "This gateway's node id.",
        ),
        fixed(
            "num.partitions",
            c.auto_create_partitions.to_string(),
            ConfigType::Int,
            "Partitions of a topic created without a count.",
        ),
        fixed(
            "offsets.retention.minutes",
            (c.limits.offsets_retention.as_secs() / 60).to_string(),
            ConfigType::Int,
            "How long committed offsets of an empty group are kept.",
        ),
        fixed(
            "offsets.topic.replication.factor",
            "1".into(),
            ConfigType::Short,
            "Copies of committed offsets kept by the gateway itself (the store handles durability).",
        ),
        fixed(
            "socket.request.max.bytes",
            c.limits.max_frame_size.to_string(),
            ConfigType::Int,
            "Largest request accepted.",
        ),
        fixed(
            "transaction.state.log.replication.factor",
            "1".into(),
            ConfigType::Short,
            "Copies of transaction state kept by the gateway itself.",
        ),
    ];
    for def in TOPIC_CONFIGS {
        let Some(name) = def.broker_synonyms.first() else {
            continue;
        };
        entries.push(Entry {
            name,
            value: defaults.value_of(def.name).unwrap_or_default(),
            read_only: true,
            source: broker_source(defaults.differs_from_kafka(def.name)),
            kind: def.kind,
            doc: def.doc,
            synonyms: broker_synonyms(def, defaults),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(b.name));
    entries.dedup_by(|a, b| a.name == b.name);
    entries
}

/// One change to a topic setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    /// Set the value.
    Set(&'a str),
    /// Remove the override: back to the broker default.
    Delete,
    /// Add items to a list setting (those not already in it).
    Append(&'a str),
    /// Remove items from a list setting.
    Subtract(&'a str),
}

/// Applies `changes` on top of `base`, in order, then checks the rules between settings.
/// Every failure is `INVALID_CONFIG` with a message saying why.
pub(crate) fn apply<'a>(
    defaults: &TopicConfig,
    mut base: TopicConfig,
    changes: impl IntoIterator<Item = (&'a str, Op<'a>)>,
) -> Result<TopicConfig, (ErrorCode, String)> {
    let invalid = |m: String| (ErrorCode::INVALID_CONFIG, m);
    for (name, op) in changes {
        let value = match op {
            Op::Set(v) => Some(v.to_owned()),
            Op::Delete => None,
            Op::Append(items) | Op::Subtract(items) => {
                let def = registry::lookup(name)
                    .ok_or_else(|| invalid(format!("{name} is not a topic config")))?;
                if def.kind != ConfigType::List {
                    let verb = if matches!(op, Op::Append(_)) {
                        "APPEND to"
                    } else {
                        "SUBTRACT from"
                    };
                    return Err(invalid(format!(
                        "cannot {verb} {name}: it is a {}, not a list",
                        def.kind.as_str()
                    )));
                }
                let current = base.value_of(name).unwrap_or_default();
                let mut list: Vec<&str> = split_list(&current).collect();
                let given: Vec<&str> = split_list(items).collect();
                if matches!(op, Op::Append(_)) {
                    for item in given {
                        if !list.contains(&item) {
                            list.push(item);
                        }
                    }
                } else {
                    list.retain(|item| !given.contains(item));
                }
                Some(list.join(","))
            }
        };
        base.set(defaults, name, value.as_deref())
            .map_err(|e| invalid(e.to_string()))?;
    }
    base.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(base)
}

fn split_list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The described entries of one resource, or the error to answer for it.
async fn entries_of(
    ctx: &Ctx<'_>,
    r: &DescribeConfigsResource,
) -> Result<Vec<Entry>, (ErrorCode, String)> {
    let this_broker = |name: &str| -> Result<(), (ErrorCode, String)> {
        if name.is_empty() || name == ctx.broker.config.node_id.to_string() {
            Ok(())
        } else {
            Err((
                ErrorCode::INVALID_REQUEST,
                format!(
                    "unexpected broker id {name}: this is broker {}",
                    ctx.broker.config.node_id
                ),
            ))
        }
    };
    match r.resource_type {
        RESOURCE_TOPIC => match ctx.broker.stores.log.topic(&r.resource_name).await {
            Ok(Some(t)) => Ok(describe_topic(
                &t.config,
                &ctx.broker.config.default_topic_config,
            )),
            Ok(None) => Err((
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "unknown topic".to_string(),
            )),
            Err(e) => Err((e.error_code(), e.to_string())),
        },
        RESOURCE_BROKER => this_broker(&r.resource_name).map(|()| describe_broker(ctx)),
        RESOURCE_BROKER_LOGGER if r.resource_name.is_empty() => Err((
            ErrorCode::INVALID_REQUEST,
            "broker id must not be empty".into(),
        )),
        RESOURCE_BROKER_LOGGER => this_broker(&r.resource_name).map(|()| Vec::new()),
        RESOURCE_CLIENT_METRICS if r.resource_name.is_empty() => Err((
            ErrorCode::INVALID_REQUEST,
            "client metrics subscription name must not be empty".into(),
        )),
        RESOURCE_CLIENT_METRICS => Ok(Vec::new()),
        RESOURCE_GROUP => Err((
            ErrorCode::INVALID_REQUEST,
            "group configs are not supported by this gateway".into(),
        )),
        other => Err((
            ErrorCode::INVALID_REQUEST,
            format!("unsupported resource type {other}"),
        )),
    }
}

pub(crate) async fn describe(
    ctx: &Ctx<'_>,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(req.resources.len());
    // Each resource is answered with every setting (with synonyms and descriptions,
    // kilobytes), so a resource named again in the same request gets `INVALID_REQUEST`
    // instead of another copy: the answer grows with the distinct resources, not with
    // the repetitions. Kafka answers every copy.
    let mut seen = std::collections::HashSet::with_capacity(req.resources.len());
    for r in &req.resources {
        let described = if seen.insert((r.resource_type, &*r.resource_name)) {
            entries_of(ctx, r).await
        } else {
            Err((
                ErrorCode::INVALID_REQUEST,
                "resource named more than once in the request".to_string(),
            ))
        };
        results.push(match described {
            Ok(entries) => DescribeConfigsResult {
                error_code: ErrorCode::NONE.code(),
                error_message: None,
                resource_type: r.resource_type,
                resource_name: r.resource_name.clone(),
                configs: entries
                    .into_iter()
                    .filter(|e| match &r.configuration_keys {
                        // Kafka treats an empty list like no list: everything.
                        Some(keys) if !keys.is_empty() => keys.iter().any(|k| **k == *e.name),
                        _ => true,
                    })
                    .map(|e| result_entry(ctx.version, &req, e))
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

fn result_entry(
    version: i16,
    req: &DescribeConfigsRequest,
    e: Entry,
) -> DescribeConfigsResourceResult {
    let v3 = version >= 3;
    DescribeConfigsResourceResult {
        name: bs(e.name),
        value: Some(bs(e.value)),
        read_only: e.read_only,
        config_source: e.source,
        is_sensitive: e.kind == ConfigType::Password,
        synonyms: if req.include_synonyms {
            e.synonyms
                .into_iter()
                .map(|s| DescribeConfigsSynonym {
                    name: bs(s.name),
                    value: Some(bs(s.value)),
                    source: s.source,
                    ..DescribeConfigsSynonym::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        config_type: if v3 { e.kind.code() } else { 0 },
        documentation: (v3 && req.include_documentation).then(|| bs(e.doc)),
        ..DescribeConfigsResourceResult::default()
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
                "broker configs come from the gateway's configuration and cannot be changed at runtime"
                    .into(),
            ));
        }
        RESOURCE_BROKER_LOGGER | RESOURCE_CLIENT_METRICS | RESOURCE_GROUP => {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!("altering resource type {resource_type} is not supported by this gateway"),
            ));
        }
        other => {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!("unsupported resource type {other}"),
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
        info!(topic = name, overrides = ?cfg.overrides, "topic config changed");
    }
    Ok(())
}

/// `INVALID_REQUEST` when a name appears twice among one resource's changes.
fn no_duplicates<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), (ErrorCode, String)> {
    let mut seen = HashSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!("config {n} given more than once"),
            ));
        }
    }
    Ok(())
}

pub(crate) async fn alter(ctx: &Ctx<'_>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let defaults = &ctx.broker.config.default_topic_config;
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        // AlterConfigs replaces the whole set: what is not named returns to its default.
        let outcome = match no_duplicates(r.configs.iter().map(|c| &*c.name)) {
            Err(e) => Err(e),
            Ok(()) => {
                alter_one(
                    ctx,
                    r.resource_type,
                    &r.resource_name,
                    req.validate_only,
                    |_| {
                        let mut base = defaults.clone();
                        base.overrides.clear();
                        apply(
                            defaults,
                            base,
                            r.configs.iter().map(|c| {
                                let op = c.value.as_deref().map_or(Op::Delete, Op::Set);
                                (&*c.name, op)
                            }),
                        )
                    },
                )
                .await
            }
        };
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
    const APPEND: i8 = 2;
    const SUBTRACT: i8 = 3;
    let defaults = &ctx.broker.config.default_topic_config;
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let ops: Result<Vec<(&str, Op<'_>)>, (ErrorCode, String)> =
            no_duplicates(r.configs.iter().map(|c| &*c.name)).and_then(|()| {
                r.configs
                    .iter()
                    .map(|c| {
                        let name: &str = &c.name;
                        let value = c.value.as_deref();
                        let needs_value = || {
                            (
                                ErrorCode::INVALID_CONFIG,
                                format!("{name}: a value is required for this operation"),
                            )
                        };
                        let op = match c.config_operation {
                            SET => Op::Set(value.ok_or_else(needs_value)?),
                            DELETE => Op::Delete,
                            APPEND => Op::Append(value.ok_or_else(needs_value)?),
                            SUBTRACT => Op::Subtract(value.ok_or_else(needs_value)?),
                            other => {
                                return Err((
                                    ErrorCode::INVALID_REQUEST,
                                    format!("unknown operation {other} on {name}"),
                                ));
                            }
                        };
                        Ok((name, op))
                    })
                    .collect()
            });
        let outcome = match ops {
            Err(e) => Err(e),
            Ok(ops) => {
                alter_one(
                    ctx,
                    r.resource_type,
                    &r.resource_name,
                    req.validate_only,
                    |current| apply(defaults, current, ops),
                )
                .await
            }
        };
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

#[cfg(test)]
#[path = "configs_tests.rs"]
mod tests;
