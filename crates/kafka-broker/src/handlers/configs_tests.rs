//! CreateTopics, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through the
//! whole request path (encode, dispatch, decode at the version asked), on the embedded
//! store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::dispatch::{self, Outcome};
use crate::server::Stores;
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::topic_config::registry::TOPIC_CONFIGS;
use crate::store::{LogStore, TopicConfig};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig as LegacyConfig,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

fn s(v: &str) -> ByteString {
    ByteString::from(v.to_string())
}

/// A broker whose configuration sets `retention.ms` (so it shows as the broker's own).
fn broker() -> (Broker, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let stores = Stores {
        log: store.clone(),
        offsets: store.clone(),
    };
    let config = BrokerConfig {
        default_topic_config: TopicConfig {
            retention_ms: 3_600_000,
            ..TopicConfig::default()
        },
        ..BrokerConfig::default()
    };
    let pipeline = crate::pipeline::Pipeline::new(Vec::new());
    (Broker::new(config, stores, pipeline), store)
}

async fn call(broker: &Broker, key: ApiKey, version: i16, body: RequestBody) -> ResponseBody {
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 7,
        client_id: Some(s("test")),
        ..Default::default()
    };
    let frame = encode_request(&header, &body).expect("encodes");
    let peer = "127.0.0.1:1".parse().unwrap();
    let Outcome::Respond(resp) = dispatch::handle(broker, peer, frame.slice(4..)).await else {
        panic!("no response");
    };
    let bytes = resp.to_bytes();
    decode_response(key, version, &bytes.slice(4..))
        .expect("decodes")
        .1
}

async fn create(broker: &Broker, name: &str, configs: &[(&str, &str)]) -> (i16, Option<String>) {
    let req = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: s(name),
            num_partitions: 1,
            replication_factor: 1,
            configs: configs
                .iter()
                .map(|(n, v)| CreatableTopicConfig {
                    name: s(n),
                    value: Some(s(v)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        timeout_ms: 1000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = call(broker, ApiKey::CreateTopics, 7, req.into()).await
    else {
        panic!("not CreateTopics");
    };
    let t = &r.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

async fn describe(
    broker: &Broker,
    version: i16,
    kind: i8,
    name: &str,
    keys: Option<&[&str]>,
) -> DescribeConfigsResult {
    let req = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: kind,
            resource_name: s(name),
            configuration_keys: keys.map(|k| k.iter().map(|n| s(n)).collect()),
            ..Default::default()
        }],
        include_synonyms: true,
        include_documentation: version >= 3,
        ..Default::default()
    };
    let ResponseBody::DescribeConfigs(mut r) =
        call(broker, ApiKey::DescribeConfigs, version, req.into()).await
    else {
        panic!("not DescribeConfigs");
    };
    r.results.remove(0)
}

async fn incremental(
    broker: &Broker,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> i16 {
    let req = IncrementalAlterConfigsRequest {
        resources: vec![IncResource {
            resource_type: TOPIC,
            resource_name: s(name),
            configs: ops
                .iter()
                .map(|(n, op, v)| AlterableConfig {
                    name: s(n),
                    config_operation: *op,
                    value: v.map(s),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        validate_only,
        ..Default::default()
    };
    let ResponseBody::IncrementalAlterConfigs(r) =
        call(broker, ApiKey::IncrementalAlterConfigs, 1, req.into()).await
    else {
        panic!("not IncrementalAlterConfigs");
    };
    r.responses[0].error_code
}

async fn overrides(store: &MemoryStore, name: &str) -> Vec<(String, String)> {
    let t = store.topic(name).await.unwrap().unwrap();
    t.config.overrides.into_iter().collect()
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test]
async fn create_topics_accepts_every_kafka_setting_and_describe_reports_all_with_sources() {
    let (broker, store) = broker();
    // The settings librdkafka's own admin tests create topics with.
    let given = [
        ("compression.type", "lz4"),
        ("delete.retention.ms", "900"),
        ("cleanup.policy", "compact"),
        ("min.insync.replicas", "1"),
        ("segment.jitter.ms", "10"),
        ("preallocate", "true"),
    ];
    assert_eq!(create(&broker, "c", &given).await.0, 0);
    let t = store.topic("c").await.unwrap().unwrap();
    assert_eq!(t.config.delete_retention_ms, 900);
    assert!(t.config.cleanup_policy.compacts());
    assert_eq!(t.config.retention_ms, 3_600_000);

    for version in 1..=4i16 {
        let d = describe(&broker, version, TOPIC, "c", None).await;
        assert_eq!(d.error_code, 0);
        assert_eq!(d.configs.len(), TOPIC_CONFIGS.len(), "v{version}");
        for c in &d.configs {
            let name = c.name.to_string();
            let expected_source = if given.iter().any(|(n, _)| *n == name) {
                1
            } else if name == "retention.ms" {
                4
            } else {
                5
            };
            assert_eq!(c.config_source, expected_source, "{name} v{version}");
            assert!(!c.read_only);
            if version >= 3 {
                assert!(c.config_type > 0, "{name}");
                assert!(c.documentation.as_ref().is_some_and(|d| !d.is_empty()));
            } else {
                assert_eq!(c.config_type, 0);
            }
        }
        let get = |n: &str| d.configs.iter().find(|c| &*c.name == n).unwrap();
        assert_eq!(get("compression.type").value.as_deref(), Some("lz4"));
        assert_eq!(get("retention.ms").value.as_deref(), Some("3600000"));
        assert_eq!(get("segment.ms").value.as_deref(), Some("604800000"));
        let syn: Vec<(String, i8)> = get("delete.retention.ms")
            .synonyms
            .iter()
            .map(|s| (s.name.to_string(), s.source))
            .collect();
        assert_eq!(
            syn,
            vec![
                ("delete.retention.ms".into(), 1),
                ("log.cleaner.delete.retention.ms".into(), 5)
            ]
        );
        let syn: Vec<(String, String, i8)> = get("retention.ms")
            .synonyms
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.value.as_deref().unwrap().to_string(),
                    s.source,
                )
            })
            .collect();
        assert_eq!(
            syn,
            vec![
                ("log.retention.ms".into(), "3600000".into(), 4),
                ("log.retention.ms".into(), "604800000".into(), 5)
            ]
        );
        if version >= 3 {
            assert_eq!(get("cleanup.policy").config_type, 7);
            assert_eq!(get("min.cleanable.dirty.ratio").config_type, 6);
            assert_eq!(get("preallocate").config_type, 1);
            assert_eq!(get("max.message.bytes").config_type, 3);
        }
    }

    let only = describe(&broker, 4, TOPIC, "c", Some(&["preallocate", "nope"])).await;
    assert_eq!(only.configs.len(), 1);
    assert_eq!(only.configs[0].value.as_deref(), Some("true"));
    let all = describe(&broker, 4, TOPIC, "c", Some(&[])).await;
    assert_eq!(all.configs.len(), TOPIC_CONFIGS.len());
}

#[tokio::test]
async fn create_topics_refuses_unknown_removed_and_invalid_settings() {
    let (broker, store) = broker();
    let refused: &[(&str, &str)] = &[
        ("message.format.version", "3.0"),
        ("message.timestamp.difference.max.ms", "1000"),
        ("log.retention.ms", "1000"),
        ("no.such.thing", "x"),
        ("compression.type", "brotli"),
        ("segment.bytes", "1048575"),
        ("cleanup.policy", ""),
        ("remote.storage.enable", "true"),
        ("min.insync.replicas", "0"),
        ("retention.ms", "-2"),
        ("min.cleanable.dirty.ratio", "1.5"),
    ];
    for (i, (n, v)) in refused.iter().enumerate() {
        let topic = format!("bad{i}");
        let (code, msg) = create(&broker, &topic, &[(n, v)]).await;
        assert_eq!(code, ErrorCode::INVALID_CONFIG.code(), "{n}={v}");
        assert!(msg.unwrap().contains(n), "{n}");
        assert!(store.topic(&topic).await.unwrap().is_none());
    }
    let (code, _) = create(
        &broker,
        "lags",
        &[
            ("min.compaction.lag.ms", "10"),
            ("max.compaction.lag.ms", "5"),
        ],
    )
    .await;
    assert_eq!(code, ErrorCode::INVALID_CONFIG.code());
    // message.downconversion.enable is still defined (a no-op) in Kafka 4.1.
    assert_eq!(
        create(&broker, "ok", &[("message.downconversion.enable", "false")])
            .await
            .0,
        0
    );
}

#[tokio::test]
async fn incremental_alter_set_delete_append_subtract_and_validate_only() {
    let (broker, store) = broker();
    assert_eq!(create(&broker, "t", &[]).await.0, 0);
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    const APPEND: i8 = 2;
    const SUBTRACT: i8 = 3;

    // validate_only checks but changes nothing.
    assert_eq!(
        incremental(
            &broker,
            "t",
            &[("compression.type", SET, Some("zstd"))],
            true
        )
        .await,
        0
    );
    assert!(overrides(&store, "t").await.is_empty());
    assert_eq!(
        incremental(
            &broker,
            "t",
            &[("compression.type", SET, Some("nope"))],
            true
        )
        .await,
        ErrorCode::INVALID_CONFIG.code()
    );

    assert_eq!(
        incremental(
            &broker,
            "t",
            &[
                ("compression.type", SET, Some("zstd")),
                ("cleanup.policy", APPEND, Some("compact")),
                ("leader.replication.throttled.replicas", APPEND, Some("0:1")),
            ],
            false
        )
        .await,
        0
    );
    assert_eq!(
        overrides(&store, "t").await,
        owned(&[
            ("cleanup.policy", "compact,delete"),
            ("compression.type", "zstd"),
            ("leader.replication.throttled.replicas", "0:1"),
        ])
    );
    let t = store.topic("t").await.unwrap().unwrap();
    assert!(t.config.cleanup_policy.compacts() && t.config.cleanup_policy.deletes());

    assert_eq!(
        incremental(
            &broker,
            "t",
            &[
                ("cleanup.policy", SUBTRACT, Some("delete")),
                ("compression.type", DELETE, None),
                (
                    "leader.replication.throttled.replicas",
                    APPEND,
                    Some("0:1,1:1")
                ),
            ],
            false
        )
        .await,
        0
    );
    assert_eq!(
        overrides(&store, "t").await,
        owned(&[
            ("cleanup.policy", "compact"),
            ("leader.replication.throttled.replicas", "0:1,1:1"),
        ])
    );

    // Refusals leave the topic as it was.
    let before = overrides(&store, "t").await;
    for (ops, code) in [
        (
            vec![("retention.ms", APPEND, Some("1"))],
            ErrorCode::INVALID_CONFIG,
        ),
        (
            vec![("compression.type", SUBTRACT, Some("lz4"))],
            ErrorCode::INVALID_CONFIG,
        ),
        (
            vec![("cleanup.policy", SUBTRACT, Some("compact"))],
            ErrorCode::INVALID_CONFIG,
        ),
        (vec![("no.such", SET, Some("1"))], ErrorCode::INVALID_CONFIG),
        (vec![("retention.ms", SET, None)], ErrorCode::INVALID_CONFIG),
        (
            vec![("retention.ms", 9, Some("1"))],
            ErrorCode::INVALID_REQUEST,
        ),
        (
            vec![
                ("retention.ms", SET, Some("1")),
                ("retention.ms", SET, Some("2")),
            ],
            ErrorCode::INVALID_REQUEST,
        ),
    ] {
        assert_eq!(
            incremental(&broker, "t", &ops, false).await,
            code.code(),
            "{ops:?}"
        );
        assert_eq!(overrides(&store, "t").await, before);
    }
    assert_eq!(
        incremental(
            &broker,
            "missing",
            &[("retention.ms", SET, Some("1"))],
            false
        )
        .await,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );
}

#[tokio::test]
async fn legacy_alter_replaces_the_whole_set() {
    let (broker, store) = broker();
    assert_eq!(
        create(
            &broker,
            "t",
            &[("retention.ms", "5"), ("preallocate", "true")]
        )
        .await
        .0,
        0
    );
    let req = AlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: TOPIC,
            resource_name: s("t"),
            configs: vec![LegacyConfig {
                name: s("min.insync.replicas"),
                value: Some(s("2")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::AlterConfigs(r) = call(&broker, ApiKey::AlterConfigs, 2, req.into()).await
    else {
        panic!("not AlterConfigs");
    };
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(
        overrides(&store, "t").await,
        owned(&[("min.insync.replicas", "2")])
    );
    let t = store.topic("t").await.unwrap().unwrap();
    assert_eq!(t.config.retention_ms, 3_600_000);
}

#[tokio::test]
async fn broker_and_other_resources() {
    let (broker, _) = broker();
    let d = describe(&broker, 4, BROKER, "", None).await;
    assert_eq!(d.error_code, 0);
    let get = |n: &str| {
        d.configs
            .iter()
            .find(|c| &*c.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };
    assert_eq!(get("log.retention.ms").value.as_deref(), Some("3600000"));
    assert_eq!(get("log.retention.ms").config_source, 4);
    assert_eq!(get("log.cleanup.policy").value.as_deref(), Some("delete"));
    assert_eq!(get("log.cleanup.policy").config_source, 5);
    assert_eq!(get("message.max.bytes").value.as_deref(), Some("1048588"));
    assert_eq!(
        get("log.cleaner.min.cleanable.ratio").value.as_deref(),
        Some("0.5")
    );
    assert_eq!(
        get("default.replication.factor").value.as_deref(),
        Some("1")
    );
    assert_eq!(get("num.partitions").config_source, 4);
    assert!(d.configs.iter().all(|c| c.read_only));
    let mut names: Vec<&str> = d.configs.iter().map(|c| &*c.name).collect();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "no name twice");

    assert_eq!(
        describe(&broker, 4, BROKER, "99", None).await.error_code,
        ErrorCode::INVALID_REQUEST.code()
    );
    let me = broker.config.node_id.to_string();
    let logger = describe(&broker, 4, 8, &me, None).await;
    assert_eq!((logger.error_code, logger.configs.len()), (0, 0));
    assert_eq!(
        describe(&broker, 4, 8, "", None).await.error_code,
        ErrorCode::INVALID_REQUEST.code()
    );
    assert_eq!(describe(&broker, 4, 16, "sub", None).await.error_code, 0);
    assert_eq!(
        describe(&broker, 4, 32, "g", None).await.error_code,
        ErrorCode::INVALID_REQUEST.code()
    );
    assert_eq!(
        describe(&broker, 4, 77, "x", None).await.error_code,
        ErrorCode::INVALID_REQUEST.code()
    );

    let req = IncrementalAlterConfigsRequest {
        resources: vec![
            IncResource {
                resource_type: BROKER,
                resource_name: s(&me),
                configs: vec![AlterableConfig {
                    name: s("log.retention.ms"),
                    config_operation: 0,
                    value: Some(s("1")),
                    ..Default::default()
                }],
                ..Default::default()
            },
            IncResource {
                resource_type: 8,
                resource_name: s(&me),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let ResponseBody::IncrementalAlterConfigs(r) =
        call(&broker, ApiKey::IncrementalAlterConfigs, 1, req.into()).await
    else {
        panic!("not IncrementalAlterConfigs");
    };
    assert_eq!(r.responses[0].error_code, ErrorCode::INVALID_CONFIG.code());
    assert_eq!(r.responses[1].error_code, ErrorCode::INVALID_REQUEST.code());
}

#[tokio::test]
async fn create_topics_v5_lists_every_setting_of_the_new_topic() {
    let (broker, _) = broker();
    let req = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: s("n"),
            num_partitions: 1,
            replication_factor: -1,
            configs: vec![CreatableTopicConfig {
                name: s("cleanup.policy"),
                value: Some(s("delete,compact")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 1000,
        validate_only: true,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = call(&broker, ApiKey::CreateTopics, 5, req.into()).await
    else {
        panic!("not CreateTopics");
    };
    let t = &r.topics[0];
    assert_eq!(t.error_code, 0);
    let configs = t.configs.as_ref().unwrap();
    assert_eq!(configs.len(), TOPIC_CONFIGS.len());
    let policy = configs
        .iter()
        .find(|c| &*c.name == "cleanup.policy")
        .unwrap();
    assert_eq!(
        (policy.value.as_deref(), policy.config_source),
        (Some("compact,delete"), 1)
    );
    let retention = configs.iter().find(|c| &*c.name == "retention.ms").unwrap();
    assert_eq!(retention.config_source, 4);

    let req = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: s("nullvalue"),
            num_partitions: 1,
            replication_factor: 1,
            configs: vec![CreatableTopicConfig {
                name: s("retention.ms"),
                value: None,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 1000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = call(&broker, ApiKey::CreateTopics, 5, req.into()).await
    else {
        panic!("not CreateTopics");
    };
    assert_eq!(r.topics[0].error_code, ErrorCode::INVALID_CONFIG.code());
}
