//! Metadata (key 3): brokers, topics and partitions.
//!
//! The brokers are the live gateways (a gateway alone: itself), each at its address for
//! the listener the request came in on; partitions are led as [`crate::cluster`] places
//! them, with leader epoch 0. A null topic list
//! (v1+) or an empty one (v0) means every topic. Unknown topics named in the request are
//! created when auto-creation is enabled and the request allows it (always before v4,
//! `allow_auto_topic_creation` from v4); otherwise they are reported
//! `UNKNOWN_TOPIC_OR_PARTITION`. Topics can be named by id from v10. One request
//! auto-creates at most `max_topics_per_request` topics; further unknown names are
//! answered `UNKNOWN_TOPIC_OR_PARTITION`, so the client asks again.
//!
//! A request can name many topics, so what it triggers is logged once per request with
//! counts (invalid names, auto-created topics), never once per topic at INFO.

use super::{Ctx, bs, valid_topic_name};
use crate::cluster::{Route, address, controller, leader};
use crate::store::{NewTopic, TopicInfo};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::{ErrorCode, Uuid};
use tracing::{debug, info};

/// The partition list of a topic as Metadata shows it: each partition led by its
/// placement in the live view (see [`crate::cluster::leader`]), its only replica. With an
/// empty view a partition has no leader (`LEADER_NOT_AVAILABLE`, leader -1).
pub(crate) fn partitions(route: &Route, topic: &str, count: i32) -> Vec<MetadataResponsePartition> {
    (0..count)
        .map(|p| match leader(&route.view, topic, p) {
            Some(node_id) => MetadataResponsePartition {
                error_code: ErrorCode::NONE.code(),
                partition_index: p,
                leader_id: node_id,
                leader_epoch: 0,
                replica_nodes: vec![node_id],
                isr_nodes: vec![node_id],
                offline_replicas: Vec::new(),
                ..MetadataResponsePartition::default()
            },
            None => MetadataResponsePartition {
                error_code: ErrorCode::LEADER_NOT_AVAILABLE.code(),
                partition_index: p,
                leader_id: -1,
                leader_epoch: -1,
                ..MetadataResponsePartition::default()
            },
        })
        .collect()
}

fn topic_entry(route: &Route, t: &TopicInfo) -> MetadataResponseTopic {
    MetadataResponseTopic {
        error_code: ErrorCode::NONE.code(),
        name: Some(bs(t.name.clone())),
        topic_id: Uuid::from_u128(t.id),
        is_internal: false,
        partitions: partitions(route, &t.name, t.partitions),
        ..MetadataResponseTopic::default()
    }
}

/// The live gateways as `(node id, host, port)` for the listener the request came in on:
/// this gateway at that listener's advertised address, the others at their listener of
/// the same name (one without it: its first listener).
pub(crate) fn live_brokers<'a>(
    ctx: &'a Ctx<'_>,
    route: &'a Route,
) -> impl Iterator<Item = (i32, &'a str, u16)> + 'a {
    let c = &ctx.broker.config;
    let listener = &ctx.session.listener;
    route.view.members.iter().filter_map(move |m| {
        if m.node_id == route.me {
            let (h, p) = listener.advertised_or(&c.advertised_host, c.advertised_port);
            Some((m.node_id, h, p))
        } else {
            address(m, &listener.name).map(|(h, p)| (m.node_id, h, p))
        }
    })
}

/// The gateway to name in a `NOT_LEADER_OR_FOLLOWER` answer for `topic`'s `partition`
/// (the `current_leader` of Produce v10+ and Fetch v12+): its placed leader, unless that
/// is this gateway (which then holds no lease, and knows no better leader) or nobody.
pub(crate) fn leader_hint(route: &Route, topic: &str, partition: i32) -> Option<i32> {
    leader(&route.view, topic, partition).filter(|node| *node != route.me)
}

/// The addresses of `nodes` for the request's listener, as [`live_brokers`] gives them,
/// for the `node_endpoints` that go with leader hints (KIP-951).
pub(crate) fn hinted_endpoints<'a>(
    ctx: &'a Ctx<'_>,
    route: &'a Route,
    nodes: &'a std::collections::BTreeSet<i32>,
) -> impl Iterator<Item = (i32, &'a str, u16)> + 'a {
    live_brokers(ctx, route).filter(move |(node, _, _)| nodes.contains(node))
}

fn error_entry(name: Option<&str>, id: Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic {
        error_code: code.code(),
        name: name.map(bs),
        topic_id: id,
        ..MetadataResponseTopic::default()
    }
}

pub(crate) async fn handle(ctx: &Ctx<'_>, req: MetadataRequest) -> MetadataResponse {
    let c = &ctx.broker.config;
    let route = ctx.broker.route();
    let log = &ctx.broker.stores.log;
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && ctx.version == 0,
    };
    let mut topics = Vec::new();
    if all {
        match log.topics().await {
            Ok(list) => topics.extend(list.iter().map(|t| topic_entry(&route, t))),
            Err(e) => {
                return MetadataResponse {
                    error_code: e.error_code().code(),
                    ..base(ctx, &route)
                };
            }
        }
    } else {
        let may_create = c.auto_create_topics && (ctx.version < 4 || req.allow_auto_topic_creation);
        let (mut invalid, mut created, mut deferred) = (0usize, 0usize, 0usize);
        for t in req.topics.iter().flatten() {
            let name = t.name.as_deref();
            let found = match name {
                Some(n) => log.topic(n).await,
                None => log.topic_by_id(t.topic_id.as_u128()).await,
            };
            let entry = match (found, name) {
                (Ok(Some(info)), _) => topic_entry(&route, &info),
                (Ok(None), None) => error_entry(None, t.topic_id, ErrorCode::UNKNOWN_TOPIC_ID),
                (Ok(None), Some(n)) => {
                    if let Err(why) = valid_topic_name(n) {
                        invalid += 1;
                        debug!(topic = n, why, "metadata for an invalid topic name");
                        error_entry(Some(n), Uuid::ZERO, ErrorCode::INVALID_TOPIC_EXCEPTION)
                    } else if may_create && created >= c.limits.max_topics_per_request {
                        // Auto-creation is paced like CreateTopics: the rest of the names wait
                        // for the client's next Metadata request.
                        deferred += 1;
                        error_entry(Some(n), Uuid::ZERO, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                    } else if may_create {
                        let new = NewTopic {
                            name: n.to_string(),
                            partitions: c.auto_create_partitions,
                            config: c.default_topic_config.clone(),
                        };
                        match log.create_topic(new, false).await {
                            Ok(info) => {
                                created += 1;
                                debug!(
                                    topic = n,
                                    partitions = info.partitions,
                                    "topic auto-created"
                                );
                                topic_entry(&route, &info)
                            }
                            // Lost a race with another creator: report what exists now.
                            Err(crate::store::StoreError::TopicAlreadyExists(_)) => {
                                match log.topic(n).await {
                                    Ok(Some(info)) => topic_entry(&route, &info),
                                    _ => error_entry(
                                        Some(n),
                                        Uuid::ZERO,
                                        ErrorCode::LEADER_NOT_AVAILABLE,
                                    ),
                                }
                            }
                            Err(e) => error_entry(Some(n), Uuid::ZERO, e.error_code()),
                        }
                    } else {
                        error_entry(Some(n), Uuid::ZERO, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                    }
                }
                (Err(e), n) => error_entry(n, t.topic_id, e.error_code()),
            };
            topics.push(entry);
        }
        if invalid > 0 {
            info!(
                invalid,
                named = topics.len(),
                "metadata request named invalid topic names"
            );
        }
        if created > 0 || deferred > 0 {
            info!(
                created,
                deferred, "topics auto-created by a metadata request"
            );
        }
    }
    // KIP-430 (v8+): without authorization every operation a topic (and, v8-10, the
    // cluster) supports, as Kafka answers without an authorizer; the authorization
    // layer, when on, puts the principal's own.
    let mut cluster_authorized_operations = i32::MIN;
    if ctx.version >= 8 {
        if req.include_topic_authorized_operations {
            let all = crate::authz::api::all_operations(crate::authz::ResourceType::Topic);
            for t in topics.iter_mut().filter(|t| t.name.is_some()) {
                t.topic_authorized_operations = all;
            }
        }
        if ctx.version <= 10 && req.include_cluster_authorized_operations {
            cluster_authorized_operations =
                crate::authz::api::all_operations(crate::authz::ResourceType::Cluster);
        }
    }
    MetadataResponse {
        topics,
        cluster_authorized_operations,
        ..base(ctx, &route)
    }
}

fn base(ctx: &Ctx<'_>, route: &Route) -> MetadataResponse {
    let c = &ctx.broker.config;
    // The live gateways, each at its address for the listener the client came in on.
    let brokers = live_brokers(ctx, route)
        .map(|(node_id, host, port)| MetadataResponseBroker {
            node_id,
            host: bs(host.to_owned()),
            port: i32::from(port),
            rack: None,
            ..MetadataResponseBroker::default()
        })
        .collect();
    MetadataResponse {
        brokers,
        cluster_id: Some(bs(c.cluster_id.clone())),
        controller_id: controller(&route.view).unwrap_or(-1),
        ..MetadataResponse::default()
    }
}
