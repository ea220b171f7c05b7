use super::api::{Alternative, Check, OnDeny, Target, UNCHECKED, When, required};
use super::*;
use kafka_protocol::{ApiKey, ErrorCode, RequestBody};

#[test]
fn every_advertised_api_has_an_authorization_rule() {
    for (key, _) in crate::handlers::advertised_all() {
        let body = RequestBody::default_for(key).expect("advertised keys have bodies");
        let checks = required(&body);
        assert!(checks.is_some(), "{} has no authorization rule", key.name());
        if UNCHECKED.contains(&key) {
            assert_eq!(checks, Some(Vec::new()), "{}", key.name());
        }
    }
    // Something outside the table is reported, not waved through.
    let unknown = ApiKey::ALL
        .iter()
        .copied()
        .filter(|k| crate::handlers::advertised(*k).is_none())
        .filter_map(|k| RequestBody::default_for(k).ok())
        .find(|b| !matches!(b, RequestBody::DescribeAcls(_)));
    if let Some(b) = unknown {
        assert_eq!(required(&b), None, "{}", b.api_key().name());
    }
}

fn topic_target<'a>(c: &'a Check<'a>) -> Option<&'a str> {
    match &c.target {
        Target::Named(ResourceType::Topic, n) => Some(n),
        _ => None,
    }
}

#[test]
fn table_entries_follow_kafka() {
    use kafka_protocol::messages::*;
    // Produce: WRITE per topic, and WRITE on the transactional id.
    let p = produce_request::ProduceRequest {
        transactional_id: Some("tx".into()),
        topic_data: vec![produce_request::TopicProduceData {
            name: "t".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let body = RequestBody::Produce(p);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].error, ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    assert_eq!(c[1].operation, Operation::Write);
    assert_eq!(topic_target(&c[1]), Some("t"));
    assert_eq!(c[1].error, ErrorCode::TOPIC_AUTHORIZATION_FAILED);

    // Metadata for all topics hides; named topics are refused; creation needs CREATE.
    let all = metadata_request::MetadataRequest {
        topics: None,
        ..Default::default()
    };
    let body = RequestBody::Metadata(all);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].on_deny, OnDeny::Hide);
    assert_eq!(c[0].target, Target::EachListed(ResourceType::Topic));
    let named = metadata_request::MetadataRequest {
        topics: Some(vec![metadata_request::MetadataRequestTopic {
            name: Some("t".into()),
            ..Default::default()
        }]),
        allow_auto_topic_creation: true,
        ..Default::default()
    };
    let body = RequestBody::Metadata(named);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c[0].operation, Operation::Describe);
    assert_eq!(c[0].on_deny, OnDeny::Refuse);
    assert_eq!(c[1].operation, Operation::Create);
    assert_eq!(c[1].when, When::Creating);
    assert_eq!(c[1].alternative, Alternative::Cluster);

    // OffsetCommit: READ on the group (whole request) and READ on each topic.
    let oc = offset_commit_request::OffsetCommitRequest {
        group_id: "g".into(),
        topics: vec![offset_commit_request::OffsetCommitRequestTopic {
            name: "t".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let body = RequestBody::OffsetCommit(oc);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c[0].target, Target::Named(ResourceType::Group, "g"));
    assert_eq!(c[0].operation, Operation::Read);
    assert!(c[0].request_wide);
    assert_eq!(c[0].error, ErrorCode::GROUP_AUTHORIZATION_FAILED);
    assert_eq!(c[1].operation, Operation::Read);

    // OffsetFetch with groups: each group's check, then its topics'.
    let of = offset_fetch_request::OffsetFetchRequest {
        groups: vec![
            offset_fetch_request::OffsetFetchRequestGroup {
                group_id: "g1".into(),
                topics: None,
                ..Default::default()
            },
            offset_fetch_request::OffsetFetchRequestGroup {
                group_id: "g2".into(),
                topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopics {
                    name: "t".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let body = RequestBody::OffsetFetch(of);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c.len(), 4);
    assert_eq!(c[0].target, Target::Named(ResourceType::Group, "g1"));
    assert!(!c[0].request_wide);
    assert_eq!(c[1].on_deny, OnDeny::Hide);
    assert_eq!(c[2].target, Target::Named(ResourceType::Group, "g2"));
    assert_eq!(topic_target(&c[3]), Some("t"));

    // ListGroups hides groups unless DESCRIBE on the cluster.
    let body = RequestBody::ListGroups(Default::default());
    let c = required(&body).unwrap_or_default();
    assert_eq!(c[0].on_deny, OnDeny::Hide);
    assert_eq!(c[0].alternative, Alternative::Cluster);

    // InitProducerId without a transactional id: IDEMPOTENT_WRITE or WRITE on any topic.
    let ipi = init_producer_id_request::InitProducerIdRequest {
        transactional_id: None,
        ..Default::default()
    };
    let body = RequestBody::InitProducerId(ipi);
    let c = required(&body).unwrap_or_default();
    assert_eq!(c[0].operation, Operation::IdempotentWrite);
    assert_eq!(c[0].error, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    assert_eq!(
        c[0].alternative,
        Alternative::AnyOf(ResourceType::Topic, Operation::Write)
    );

    // DescribeConfigs: topics by name, brokers are the cluster.
    let mut dc = describe_configs_request::DescribeConfigsRequest::default();
    for (t, n) in [(2, "t"), (4, "0")] {
        dc.resources
            .push(describe_configs_request::DescribeConfigsResource {
                resource_type: t,
                resource_name: n.into(),
                ..Default::default()
            });
    }
    let body = RequestBody::DescribeConfigs(dc);
    let c = required(&body).unwrap_or_default();
    assert_eq!(topic_target(&c[0]), Some("t"));
    assert_eq!(c[0].operation, Operation::DescribeConfigs);
    assert_eq!(c[1].error, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);

    // SCRAM credential management is a cluster matter.
    let body = RequestBody::AlterUserScramCredentials(Default::default());
    let c = required(&body).unwrap_or_default();
    assert_eq!(c[0].operation, Operation::Alter);
    assert_eq!(c[0].error, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
}
