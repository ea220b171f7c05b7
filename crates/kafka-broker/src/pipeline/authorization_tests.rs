//! The authorization layer over every served API and version, driven through the
//! dispatcher with a session carrying a principal: allowed with the permission (the
//! handler's normal answer), refused without it (the right code for every entry, nothing
//! stored, deleted or created), and the adversarial cases (spoofed ids, huge requests,
//! floods, ACL changes).

use super::*;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::dispatch::{self, Outcome};
use crate::handlers::advertised_all;
use crate::pipeline::Pipeline;
use crate::server::Stores;
use crate::session::{AuthState, Listener, Principal, SecurityProtocol};
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::{CommittedOffset, LogStore, NewTopic, OffsetStore, TopicConfig};
use bytes::Bytes;
use kafka_authz::store::{MemoryAclStore, parse_bindings};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString};

const ALICE: &str = "alice";

/// Every binding alice needs for every API.
const EVERYTHING: &str = r#"{"bindings": [
  {"resource_type": "TOPIC", "name": "*", "principal": "User:alice", "operation": "ALL"},
  {"resource_type": "GROUP", "name": "*", "principal": "User:alice", "operation": "ALL"},
  {"resource_type": "CLUSTER", "name": "kafka-cluster", "principal": "User:alice", "operation": "ALL"},
  {"resource_type": "TRANSACTIONAL_ID", "name": "*", "principal": "User:alice", "operation": "ALL"}
]}"#;

/// A binding that grants alice nothing.
const SOMEONE_ELSE: &str = r#"{"bindings": [
  {"resource_type": "TOPIC", "name": "zzz", "principal": "User:carol", "operation": "READ"}
]}"#;

struct Setup {
    broker: Broker,
    store: Arc<MemoryStore>,
    acls: Arc<AclAuthorizer>,
    layer: Option<Arc<Authorization>>,
    topic_id: u128,
}

/// A broker with topic `t` (2 partitions), `secret` (1 partition) and group `g` with a
/// committed offset; with the authorization layer over `bindings` (JSON, `None`: no
/// layer) and `allow_everyone_if_no_acl_found`.
async fn setup(bindings: Option<&str>, allow_everyone: bool) -> Setup {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let mut topic_id = 0;
    for (name, partitions) in [("t", 2), ("secret", 1)] {
        let info = store
            .create_topic(
                NewTopic {
                    name: name.into(),
                    partitions,
                    config: TopicConfig::default(),
                },
                false,
            )
            .await
            .expect("topic");
        if name == "t" {
            topic_id = info.id;
        }
    }
    store
        .commit(
            "g",
            vec![(
                "t".into(),
                0,
                CommittedOffset {
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                    commit_timestamp: 0,
                },
            )],
        )
        .await
        .expect("commit");
    let acl_store = Arc::new(
        MemoryAclStore::with_bindings(
            parse_bindings(bindings.unwrap_or(r#"{"bindings":[]}"#)).expect("bindings"),
        )
        .expect("store"),
    );
    let acls = Arc::new(AclAuthorizer::new(acl_store, allow_everyone));
    acls.reload().await.expect("reload");
    let config = BrokerConfig {
        sasl: crate::config::SaslSettings {
            super_users: vec!["User:admin".into()],
            ..Default::default()
        },
        ..BrokerConfig::default()
    };
    let layer = bindings.map(|_| {
        Arc::new(Authorization::new(
            acls.clone(),
            Vec::new(),
            config.sasl.super_users.clone(),
            store.clone(),
            config.auto_create_topics,
            config.limits.max_entries_per_request,
        ))
    });
    let mut layers: Vec<Arc<dyn Layer>> = vec![Arc::new(crate::pipeline::client_info::ClientInfo)];
    if let Some(l) = &layer {
        layers.push(l.clone());
    }
    let stores = Stores {
        log: store.clone(),
        offsets: store.clone(),
    };
    Setup {
        broker: Broker::new(config, stores, Pipeline::new(layers)),
        store,
        acls,
        layer,
        topic_id,
    }
}

fn session(user: &str) -> Session {
    let mut s = Session::new(
        1,
        Listener::new("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext),
        "10.0.0.1:4000".parse().expect("addr"),
    );
    s.principal = Principal::user(user);
    s.auth = AuthState::Authenticated { expires: None };
    s
}

/// Sends `body` at `v` as `user`; the decoded answer, or `None` when the connection
/// closes or nothing is answered.
async fn send(
    b: &Broker,
    user: &str,
    key: ApiKey,
    v: i16,
    body: RequestBody,
) -> Option<ResponseBody> {
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: v,
        correlation_id: 9,
        client_id: Some(ByteString::from_static("test")),
        ..Default::default()
    };
    let frame = encode_request(&header, &body)
        .unwrap_or_else(|e| panic!("{key:?} v{v}: request encodes: {e}"));
    match dispatch::handle_as(b, session(user), frame.slice(4..)).await {
        Outcome::Respond(r) | Outcome::RespondThenClose(r) => {
            let bytes = r.to_bytes();
            let (_, body) = decode_response(key, v, &bytes.slice(4..))
                .unwrap_or_else(|e| panic!("{key:?} v{v}: response decodes: {e}"));
            Some(body)
        }
        Outcome::NoResponse | Outcome::Close => None,
    }
}

/// Every `error_code` of a response, in order.
fn codes(body: &ResponseBody) -> Vec<i16> {
    let text = format!("{body:?}");
    text.match_indices("error_code: ")
        .filter_map(|(i, m)| {
            let rest = &text[i + m.len()..];
            let end = rest
                .find(|c: char| c != '-' && !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}

/// What the store holds: topics, partitions, configs, watermarks, groups and offsets.
async fn state(s: &Setup) -> String {
    let mut topics = s.store.topics().await.expect("topics");
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = format!("{topics:?}");
    for t in &topics {
        for p in 0..t.partitions {
            out.push_str(&format!("{:?}", s.store.watermarks(&t.name, p).await.ok()));
        }
    }
    let mut bindings = s.acls.store().snapshot().await.expect("bindings");
    bindings.sort();
    out.push_str(&format!("{bindings:?}"));
    let mut groups = s.store.groups().await.expect("groups");
    groups.sort();
    for g in &groups {
        let mut offsets = s.store.fetch_all(g).await.expect("offsets");
        offsets.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out.push_str(&format!("{g}: {offsets:?}"));
    }
    out
}

/// One record in one uncompressed batch.
pub(crate) fn batch() -> Bytes {
    let records = vec![kafka_records::NewRecord {
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: vec![],
    }];
    let mut out = bytes::BytesMut::new();
    kafka_records::encode_batch(&kafka_records::BatchOptions::default(), &records, &mut out)
        .expect("batch");
    out.freeze()
}

/// What a refusal looks like for a sample request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Every error of the answer is this code.
    With(ErrorCode),
    /// Answered as without the layer (no check), or a listing left empty.
    NotChecked,
    /// A listing: the refused answer lists nothing.
    Hidden,
}

/// A request of `key` at `v` that needs a permission, with how its refusal looks.
fn sample(key: ApiKey, v: i16, topic_id: u128) -> (RequestBody, Refused) {
    use Refused::*;
    let t = || ByteString::from_static("t");
    let g = || ByteString::from_static("g");
    let topic = With(ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    let group = With(ErrorCode::GROUP_AUTHORIZATION_FAILED);
    let cluster = With(ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    let by_id = |v: i16, min: i16| v >= min;
    match key {
        ApiKey::Produce => (
            produce_request::ProduceRequest {
                acks: 1,
                timeout_ms: 1000,
                topic_data: vec![produce_request::TopicProduceData {
                    name: if by_id(v, 13) { ByteString::new() } else { t() },
                    topic_id: if by_id(v, 13) {
                        Uuid::from_u128(topic_id)
                    } else {
                        Uuid::ZERO
                    },
                    partition_data: vec![produce_request::PartitionProduceData {
                        index: 0,
                        records: Some(batch()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::Fetch => (
            fetch_request::FetchRequest {
                max_wait_ms: 0,
                max_bytes: 1 << 20,
                topics: vec![fetch_request::FetchTopic {
                    topic: t(),
                    topic_id: Uuid::from_u128(topic_id),
                    partitions: vec![fetch_request::FetchPartition {
                        partition: 0,
                        partition_max_bytes: 1 << 20,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::ListOffsets => (
            list_offsets_request::ListOffsetsRequest {
                topics: vec![list_offsets_request::ListOffsetsTopic {
                    name: t(),
                    partitions: vec![list_offsets_request::ListOffsetsPartition {
                        partition_index: 1,
                        timestamp: -1,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::Metadata => (
            metadata_request::MetadataRequest {
                topics: Some(vec![
                    metadata_request::MetadataRequestTopic {
                        name: Some(t()),
                        ..Default::default()
                    },
                    // Missing: auto-creation needs CREATE.
                    metadata_request::MetadataRequestTopic {
                        name: Some(ByteString::from_static("fresh")),
                        ..Default::default()
                    },
                ]),
                allow_auto_topic_creation: true,
                include_topic_authorized_operations: v >= 8,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::CreateTopics => (
            create_topics_request::CreateTopicsRequest {
                topics: vec![create_topics_request::CreatableTopic {
                    name: ByteString::from_static("new-topic"),
                    num_partitions: 3,
                    replication_factor: 1,
                    ..Default::default()
                }],
                timeout_ms: 1000,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::DeleteTopics if v >= 6 => (
            delete_topics_request::DeleteTopicsRequest {
                topics: vec![delete_topics_request::DeleteTopicState {
                    name: Some(t()),
                    ..Default::default()
                }],
                timeout_ms: 1000,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::DeleteTopics => (
            delete_topics_request::DeleteTopicsRequest {
                topic_names: vec![t()],
                timeout_ms: 1000,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::DeleteRecords => (
            delete_records_request::DeleteRecordsRequest {
                topics: vec![delete_records_request::DeleteRecordsTopic {
                    name: t(),
                    partitions: vec![delete_records_request::DeleteRecordsPartition {
                        partition_index: 0,
                        offset: 0,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                timeout_ms: 1000,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::InitProducerId => (
            init_producer_id_request::InitProducerIdRequest {
                transactional_id: None,
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::AddPartitionsToTxn => {
            use add_partitions_to_txn_request as ap;
            let topics = vec![ap::AddPartitionsToTxnTopic {
                name: t(),
                partitions: vec![0, 1],
                ..Default::default()
            }];
            if v >= 4 {
                (
                    ap::AddPartitionsToTxnRequest {
                        transactions: vec![ap::AddPartitionsToTxnTransaction {
                            transactional_id: ByteString::from_static("tx"),
                            producer_id: 1,
                            producer_epoch: 0,
                            verify_only: true,
                            topics,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                    .into(),
                    cluster,
                )
            } else {
                (
                    ap::AddPartitionsToTxnRequest {
                        v3_and_below_transactional_id: ByteString::from_static("tx"),
                        v3_and_below_producer_id: 1,
                        v3_and_below_producer_epoch: 0,
                        v3_and_below_topics: topics,
                        ..Default::default()
                    }
                    .into(),
                    With(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                )
            }
        }
        ApiKey::AddOffsetsToTxn => (
            add_offsets_to_txn_request::AddOffsetsToTxnRequest {
                transactional_id: ByteString::from_static("tx"),
                producer_id: 1,
                producer_epoch: 0,
                group_id: g(),
                ..Default::default()
            }
            .into(),
            With(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ),
        ApiKey::EndTxn => (
            end_txn_request::EndTxnRequest {
                transactional_id: ByteString::from_static("tx"),
                producer_id: 1,
                producer_epoch: 0,
                committed: true,
                ..Default::default()
            }
            .into(),
            With(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ),
        ApiKey::WriteTxnMarkers => (
            write_txn_markers_request::WriteTxnMarkersRequest {
                markers: vec![write_txn_markers_request::WritableTxnMarker {
                    producer_id: 1,
                    producer_epoch: 0,
                    transaction_result: true,
                    coordinator_epoch: 0,
                    topics: vec![write_txn_markers_request::WritableTxnMarkerTopic {
                        name: t(),
                        partition_indexes: vec![0],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::TxnOffsetCommit => (
            txn_offset_commit_request::TxnOffsetCommitRequest {
                transactional_id: ByteString::from_static("tx"),
                group_id: g(),
                producer_id: 1,
                producer_epoch: 0,
                generation_id: -1,
                topics: vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic {
                    name: t(),
                    partitions: vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition {
                        partition_index: 0,
                        committed_offset: 1,
                        committed_leader_epoch: -1,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            With(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ),
        ApiKey::DescribeTransactions => (
            describe_transactions_request::DescribeTransactionsRequest {
                transactional_ids: vec![ByteString::from_static("tx")],
                ..Default::default()
            }
            .into(),
            With(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ),
        ApiKey::ListTransactions => (
            list_transactions_request::ListTransactionsRequest::default().into(),
            // No transaction in this store: the listing is the handler's either way
            // (the filtering is `list_transactions_hides_unauthorized_ids`).
            NotChecked,
        ),
        ApiKey::OffsetForLeaderEpoch => (
            offset_for_leader_epoch_request::OffsetForLeaderEpochRequest {
                topics: vec![offset_for_leader_epoch_request::OffsetForLeaderTopic {
                    topic: t(),
                    partitions: vec![offset_for_leader_epoch_request::OffsetForLeaderPartition {
                        partition: 0,
                        leader_epoch: 0,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::DescribeConfigs => (
            describe_configs_request::DescribeConfigsRequest {
                resources: vec![describe_configs_request::DescribeConfigsResource {
                    resource_type: 2,
                    resource_name: t(),
                    configuration_keys: None,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::AlterConfigs => (
            alter_configs_request::AlterConfigsRequest {
                resources: vec![alter_configs_request::AlterConfigsResource {
                    resource_type: 2,
                    resource_name: t(),
                    configs: vec![alter_configs_request::AlterableConfig {
                        name: ByteString::from_static("retention.ms"),
                        value: Some(ByteString::from_static("1000")),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::IncrementalAlterConfigs => (
            incremental_alter_configs_request::IncrementalAlterConfigsRequest {
                resources: vec![incremental_alter_configs_request::AlterConfigsResource {
                    resource_type: 2,
                    resource_name: t(),
                    configs: vec![incremental_alter_configs_request::AlterableConfig {
                        name: ByteString::from_static("retention.ms"),
                        config_operation: 0,
                        value: Some(ByteString::from_static("1000")),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::CreatePartitions => (
            create_partitions_request::CreatePartitionsRequest {
                topics: vec![create_partitions_request::CreatePartitionsTopic {
                    name: t(),
                    count: 4,
                    assignments: None,
                    ..Default::default()
                }],
                timeout_ms: 1000,
                ..Default::default()
            }
            .into(),
            topic,
        ),
        ApiKey::DescribeCluster => (
            describe_cluster_request::DescribeClusterRequest {
                include_cluster_authorized_operations: true,
                endpoint_type: 1,
                ..Default::default()
            }
            .into(),
            NotChecked,
        ),
        ApiKey::FindCoordinator if v >= 4 => (
            find_coordinator_request::FindCoordinatorRequest {
                coordinator_keys: vec![g()],
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::FindCoordinator => (
            find_coordinator_request::FindCoordinatorRequest {
                key: g(),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::JoinGroup => (
            join_group_request::JoinGroupRequest {
                group_id: g(),
                session_timeout_ms: 10,
                rebalance_timeout_ms: 10,
                member_id: ByteString::from_static("nobody"),
                protocol_type: ByteString::from_static("consumer"),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::SyncGroup => (
            sync_group_request::SyncGroupRequest {
                group_id: g(),
                generation_id: 3,
                member_id: ByteString::from_static("nobody"),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::Heartbeat => (
            heartbeat_request::HeartbeatRequest {
                group_id: g(),
                generation_id: 3,
                member_id: ByteString::from_static("nobody"),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::LeaveGroup if v >= 3 => (
            leave_group_request::LeaveGroupRequest {
                group_id: g(),
                members: vec![leave_group_request::MemberIdentity {
                    member_id: ByteString::from_static("nobody"),
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::LeaveGroup => (
            leave_group_request::LeaveGroupRequest {
                group_id: g(),
                member_id: ByteString::from_static("nobody"),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::DescribeGroups => (
            describe_groups_request::DescribeGroupsRequest {
                groups: vec![g()],
                include_authorized_operations: v >= 3,
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::ListGroups => (
            list_groups_request::ListGroupsRequest::default().into(),
            Hidden,
        ),
        ApiKey::DeleteGroups => (
            delete_groups_request::DeleteGroupsRequest {
                groups_names: vec![g()],
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::OffsetCommit => (
            offset_commit_request::OffsetCommitRequest {
                group_id: g(),
                generation_id_or_member_epoch: -1,
                topics: vec![offset_commit_request::OffsetCommitRequestTopic {
                    name: t(),
                    partitions: vec![offset_commit_request::OffsetCommitRequestPartition {
                        partition_index: 0,
                        committed_offset: 5,
                        committed_metadata: Some(ByteString::from_static("m")),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::OffsetFetch if v >= 8 => (
            offset_fetch_request::OffsetFetchRequest {
                groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
                    group_id: g(),
                    topics: None,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::OffsetFetch => (
            offset_fetch_request::OffsetFetchRequest {
                group_id: g(),
                topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
                    name: t(),
                    partition_indexes: vec![0, 1],
                    ..Default::default()
                }]),
                ..Default::default()
            }
            .into(),
            group,
        ),
        ApiKey::OffsetDelete => (
            offset_delete_request::OffsetDeleteRequest {
                group_id: g(),
                topics: vec![offset_delete_request::OffsetDeleteRequestTopic {
                    name: t(),
                    partitions: vec![offset_delete_request::OffsetDeleteRequestPartition {
                        partition_index: 0,
                    }],
                }],
            }
            .into(),
            group,
        ),
        ApiKey::DescribeClientQuotas => (
            describe_client_quotas_request::DescribeClientQuotasRequest {
                components: vec![describe_client_quotas_request::ComponentData {
                    entity_type: ByteString::from_static("client-id"),
                    match_type: 2,
                    match_: None,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::AlterClientQuotas => (
            alter_client_quotas_request::AlterClientQuotasRequest {
                entries: vec![alter_client_quotas_request::EntryData {
                    entity: vec![alter_client_quotas_request::EntityData {
                        entity_type: ByteString::from_static("client-id"),
                        entity_name: Some(ByteString::from_static("c")),
                        ..Default::default()
                    }],
                    ops: vec![alter_client_quotas_request::OpData {
                        key: ByteString::from_static("producer_byte_rate"),
                        value: 1024.0,
                        remove: false,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::DescribeUserScramCredentials => (
            describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest::default()
                .into(),
            cluster,
        ),
        ApiKey::AlterUserScramCredentials => (
            alter_user_scram_credentials_request::AlterUserScramCredentialsRequest {
                deletions: vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion {
                        name: ByteString::from_static("bob"),
                        mechanism: 1,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::ApiVersions => (
            api_versions_request::ApiVersionsRequest::default().into(),
            NotChecked,
        ),
        ApiKey::SaslHandshake => (
            sasl_handshake_request::SaslHandshakeRequest {
                mechanism: ByteString::from_static("PLAIN"),
            }
            .into(),
            NotChecked,
        ),
        ApiKey::SaslAuthenticate => (
            sasl_authenticate_request::SaslAuthenticateRequest::default().into(),
            NotChecked,
        ),
        ApiKey::DescribeAcls => (
            describe_acls_request::DescribeAclsRequest {
                resource_type_filter: 1,
                pattern_type_filter: 1,
                operation: 1,
                permission_type: 1,
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::CreateAcls => (
            create_acls_request::CreateAclsRequest {
                creations: vec![create_acls_request::AclCreation {
                    resource_type: 2,
                    resource_name: t(),
                    resource_pattern_type: 3,
                    principal: ByteString::from_static("User:bob"),
                    host: ByteString::from_static("*"),
                    operation: 3,
                    permission_type: 3,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        ApiKey::DeleteAcls => (
            delete_acls_request::DeleteAclsRequest {
                filters: vec![delete_acls_request::DeleteAclsFilter {
                    resource_type_filter: 1,
                    pattern_type_filter: 1,
                    operation: 1,
                    permission_type: 1,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into(),
            cluster,
        ),
        other => panic!("no sample request for {other:?}: add one"),
    }
}

/// Answers that differ between two fresh brokers (generated member ids): compared by
/// their codes only.
fn comparable(body: &ResponseBody) -> Vec<i16> {
    codes(body)
}

#[tokio::test]
async fn every_api_and_version_is_allowed_with_the_permission_and_refused_without() {
    let mut checked = 0;
    for (key, range) in advertised_all() {
        for v in range.min..=range.max {
            // The handler's own answer, without the layer.
            let plain = setup(None, true).await;
            let (body, refused) = sample(key, v, plain.topic_id);
            let expected = send(&plain.broker, ALICE, key, v, body).await;

            // With every permission: the same answer.
            let allowed = setup(Some(EVERYTHING), false).await;
            let (body, _) = sample(key, v, allowed.topic_id);
            let got = send(&allowed.broker, ALICE, key, v, body).await;
            assert_eq!(
                got.as_ref().map(comparable),
                expected.as_ref().map(comparable),
                "{key:?} v{v}: allowed answer differs from the handler's"
            );

            // Without any: refused, nothing changed (the binding for someone else
            // stays, whatever DeleteAcls asks).
            let denied = setup(Some(SOMEONE_ELSE), false).await;
            let (body, _) = sample(key, v, denied.topic_id);
            let before = state(&denied).await;
            let got = send(&denied.broker, ALICE, key, v, body)
                .await
                .unwrap_or_else(|| panic!("{key:?} v{v}: refused without an answer"));
            let after = state(&denied).await;
            let nonzero: Vec<i16> = codes(&got).into_iter().filter(|c| *c != 0).collect();
            match refused {
                Refused::With(code) => {
                    assert!(!nonzero.is_empty(), "{key:?} v{v}: not refused: {got:?}");
                    assert!(
                        nonzero.iter().all(|c| *c == code.code()),
                        "{key:?} v{v}: expected only {code:?}: {got:?}"
                    );
                    assert_eq!(
                        before, after,
                        "{key:?} v{v}: refused request changed the store"
                    );
                }
                Refused::Hidden => {
                    assert!(nonzero.is_empty(), "{key:?} v{v}: {got:?}");
                    assert!(
                        !format!("{got:?}").contains("group_id: \"g\""),
                        "{key:?} v{v}: {got:?}"
                    );
                }
                Refused::NotChecked => {
                    assert_eq!(
                        Some(comparable(&got)),
                        expected.as_ref().map(comparable),
                        "{key:?} v{v}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 90, "only {checked} combinations");
}

#[tokio::test]
async fn metadata_refuses_a_missing_topic_without_create_and_creates_it_with() {
    let ask = |name: &'static str| -> RequestBody {
        metadata_request::MetadataRequest {
            topics: Some(vec![metadata_request::MetadataRequestTopic {
                name: Some(ByteString::from_static(name)),
                ..Default::default()
            }]),
            allow_auto_topic_creation: true,
            ..Default::default()
        }
        .into()
    };
    let describe_only = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "*", "principal": "User:alice", "operation": "DESCRIBE"}
    ]}"#;
    let s = setup(Some(describe_only), false).await;
    let Some(ResponseBody::Metadata(m)) =
        send(&s.broker, ALICE, ApiKey::Metadata, 9, ask("fresh")).await
    else {
        panic!("no metadata")
    };
    assert_eq!(
        m.topics[0].error_code,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()
    );
    assert!(s.store.topic("fresh").await.expect("lookup").is_none());
    // An existing topic is described without CREATE.
    let Some(ResponseBody::Metadata(m)) =
        send(&s.broker, ALICE, ApiKey::Metadata, 9, ask("t")).await
    else {
        panic!("no metadata")
    };
    assert_eq!(m.topics[0].error_code, 0);
    assert_eq!(m.topics[0].partitions.len(), 2);

    let with_create = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "fr", "pattern": "PREFIXED", "principal": "User:alice", "operation": "CREATE"},
      {"resource_type": "TOPIC", "name": "*", "principal": "User:alice", "operation": "DESCRIBE"}
    ]}"#;
    let s = setup(Some(with_create), false).await;
    let Some(ResponseBody::Metadata(m)) =
        send(&s.broker, ALICE, ApiKey::Metadata, 9, ask("fresh")).await
    else {
        panic!("no metadata")
    };
    assert_eq!(m.topics[0].error_code, 0);
    assert!(s.store.topic("fresh").await.expect("lookup").is_some());
}

#[tokio::test]
async fn produce_writes_allowed_topics_and_refuses_the_others_in_one_request() {
    let bindings = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "WRITE"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let topic = |name: &'static str| produce_request::TopicProduceData {
        name: ByteString::from_static(name),
        partition_data: vec![produce_request::PartitionProduceData {
            index: 0,
            records: Some(batch()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let body: RequestBody = produce_request::ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![topic("secret"), topic("t")],
        ..Default::default()
    }
    .into();
    let Some(ResponseBody::Produce(p)) =
        send(&s.broker, ALICE, ApiKey::Produce, 9, body.clone()).await
    else {
        panic!("no produce answer")
    };
    let code = |name: &str| {
        p.responses
            .iter()
            .find(|r| &*r.name == name)
            .map(|r| r.partition_responses[0].error_code)
    };
    assert_eq!(code("t"), Some(0));
    assert_eq!(
        code("secret"),
        Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())
    );
    assert_eq!(
        s.store.watermarks("t", 0).await.expect("t").high_watermark,
        1
    );
    assert_eq!(
        s.store
            .watermarks("secret", 0)
            .await
            .expect("secret")
            .high_watermark,
        0
    );

    // acks=0: no answer can carry the error, so the connection closes, nothing written.
    let RequestBody::Produce(mut p0) = body else {
        unreachable!()
    };
    p0.acks = 0;
    assert!(
        send(&s.broker, ALICE, ApiKey::Produce, 9, p0.into())
            .await
            .is_none()
    );
    assert_eq!(
        s.store.watermarks("t", 0).await.expect("t").high_watermark,
        1
    );
    assert_eq!(
        s.store
            .watermarks("secret", 0)
            .await
            .expect("secret")
            .high_watermark,
        0
    );
}

#[tokio::test]
async fn listings_leave_out_what_the_principal_may_not_describe() {
    let bindings = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "DESCRIBE"},
      {"resource_type": "GROUP", "name": "mine", "principal": "User:alice", "operation": "READ"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let all: RequestBody = metadata_request::MetadataRequest {
        topics: None,
        ..Default::default()
    }
    .into();
    let Some(ResponseBody::Metadata(m)) = send(&s.broker, ALICE, ApiKey::Metadata, 9, all).await
    else {
        panic!("no metadata")
    };
    let names: Vec<_> = m.topics.iter().filter_map(|t| t.name.as_deref()).collect();
    assert_eq!(names, ["t"]);
    // Metadata v0: an empty list is every topic.
    let all_v0: RequestBody = metadata_request::MetadataRequest::default().into();
    let Some(ResponseBody::Metadata(m)) = send(&s.broker, ALICE, ApiKey::Metadata, 0, all_v0).await
    else {
        panic!("no metadata")
    };
    let names: Vec<_> = m.topics.iter().filter_map(|t| t.name.as_deref()).collect();
    assert_eq!(names, ["t"]);
    let Some(ResponseBody::ListGroups(l)) = send(
        &s.broker,
        ALICE,
        ApiKey::ListGroups,
        4,
        list_groups_request::ListGroupsRequest::default().into(),
    )
    .await
    else {
        panic!("no list")
    };
    assert!(l.groups.iter().all(|g| &*g.group_id != "g"), "{l:?}");
    // A super user sees everything though nothing grants it.
    let Some(ResponseBody::ListGroups(l)) = send(
        &s.broker,
        "admin",
        ApiKey::ListGroups,
        4,
        list_groups_request::ListGroupsRequest::default().into(),
    )
    .await
    else {
        panic!("no list")
    };
    assert!(l.groups.iter().any(|g| &*g.group_id == "g"), "{l:?}");
}

#[tokio::test]
async fn topic_ids_never_reveal_names_and_unknown_ids_stay_unknown() {
    let bindings = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "ALL"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let secret = s
        .store
        .topic("secret")
        .await
        .expect("lookup")
        .expect("secret")
        .id;
    let fetch = |id: u128| -> RequestBody {
        fetch_request::FetchRequest {
            max_wait_ms: 0,
            max_bytes: 1 << 20,
            topics: vec![fetch_request::FetchTopic {
                topic_id: Uuid::from_u128(id),
                partitions: vec![fetch_request::FetchPartition {
                    partition: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .into()
    };
    for (id, code) in [
        (secret, ErrorCode::TOPIC_AUTHORIZATION_FAILED),
        (0xdead_beef, ErrorCode::UNKNOWN_TOPIC_ID),
        (s.topic_id, ErrorCode::NONE),
    ] {
        let got = send(&s.broker, ALICE, ApiKey::Fetch, 13, fetch(id))
            .await
            .expect("fetch answer");
        assert!(!format!("{got:?}").contains("secret"), "{got:?}");
        let ResponseBody::Fetch(f) = got else {
            panic!("not fetch")
        };
        assert_eq!(f.responses[0].partitions[0].error_code, code.code(), "{id}");
    }
    // Metadata by id: refused with the id alone.
    let by_id: RequestBody = metadata_request::MetadataRequest {
        topics: Some(vec![metadata_request::MetadataRequestTopic {
            topic_id: Uuid::from_u128(secret),
            name: None,
            ..Default::default()
        }]),
        allow_auto_topic_creation: false,
        ..Default::default()
    }
    .into();
    let got = send(&s.broker, ALICE, ApiKey::Metadata, 12, by_id)
        .await
        .expect("metadata");
    assert!(!format!("{got:?}").contains("secret"), "{got:?}");
    let ResponseBody::Metadata(m) = got else {
        panic!("not metadata")
    };
    assert_eq!(
        m.topics[0].error_code,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()
    );
    // DeleteTopics by id: refused, the topic stays.
    let delete: RequestBody = delete_topics_request::DeleteTopicsRequest {
        topics: vec![delete_topics_request::DeleteTopicState {
            topic_id: Uuid::from_u128(secret),
            name: None,
            ..Default::default()
        }],
        timeout_ms: 1000,
        ..Default::default()
    }
    .into();
    let got = send(&s.broker, ALICE, ApiKey::DeleteTopics, 6, delete)
        .await
        .expect("delete");
    assert!(!format!("{got:?}").contains("secret"), "{got:?}");
    assert!(s.store.topic("secret").await.expect("lookup").is_some());
}

#[tokio::test]
async fn ten_thousand_refused_topics_are_answered_without_creating_or_writing_any() {
    let s = setup(Some(r#"{"bindings":[]}"#), false).await;
    let n = 10_000;
    let names: Vec<ByteString> = (0..n).map(|i| ByteString::from(format!("x{i}"))).collect();
    let metadata: RequestBody = metadata_request::MetadataRequest {
        topics: Some(
            names
                .iter()
                .map(|name| metadata_request::MetadataRequestTopic {
                    name: Some(name.clone()),
                    ..Default::default()
                })
                .collect(),
        ),
        allow_auto_topic_creation: true,
        ..Default::default()
    }
    .into();
    let Some(ResponseBody::Metadata(m)) =
        send(&s.broker, ALICE, ApiKey::Metadata, 9, metadata).await
    else {
        panic!("no metadata")
    };
    assert_eq!(m.topics.len(), n);
    assert!(
        m.topics
            .iter()
            .all(|t| t.error_code == ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())
    );
    assert_eq!(s.store.topics().await.expect("topics").len(), 2);

    let produce: RequestBody = produce_request::ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: names
            .iter()
            .map(|name| produce_request::TopicProduceData {
                name: name.clone(),
                partition_data: vec![produce_request::PartitionProduceData {
                    index: 0,
                    records: Some(batch()),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
    .into();
    let Some(ResponseBody::Produce(p)) = send(&s.broker, ALICE, ApiKey::Produce, 9, produce).await
    else {
        panic!("no produce answer")
    };
    assert_eq!(p.responses.len(), n);
    assert_eq!(s.store.topics().await.expect("topics").len(), 2);
}

#[tokio::test]
async fn a_flood_of_refused_requests_is_answered_and_logged_once() {
    let s = setup(Some(r#"{"bindings":[]}"#), false).await;
    let (body, _) = sample(ApiKey::JoinGroup, 5, s.topic_id);
    for _ in 0..500 {
        let Some(ResponseBody::JoinGroup(j)) =
            send(&s.broker, ALICE, ApiKey::JoinGroup, 5, body.clone()).await
        else {
            panic!("no answer")
        };
        assert_eq!(j.error_code, ErrorCode::GROUP_AUTHORIZATION_FAILED.code());
    }
    let layer = s.layer.as_ref().expect("layer");
    let denials = layer.denials.lock().expect("lock");
    // One line, the rest counted.
    assert_eq!(denials.suppressed, 499);
}

#[tokio::test]
async fn an_acl_change_applies_to_the_next_request() {
    let s = setup(Some(r#"{"bindings":[]}"#), false).await;
    let (body, _) = sample(ApiKey::DescribeGroups, 5, s.topic_id);
    let code = |r: Option<ResponseBody>| match r {
        Some(ResponseBody::DescribeGroups(d)) => {
            (d.groups[0].error_code, d.groups[0].authorized_operations)
        }
        other => panic!("{other:?}"),
    };
    let (c, _) = code(send(&s.broker, ALICE, ApiKey::DescribeGroups, 5, body.clone()).await);
    assert_eq!(c, ErrorCode::GROUP_AUTHORIZATION_FAILED.code());
    s.acls
        .store()
        .add(
            parse_bindings(
                r#"{"bindings": [{"resource_type": "GROUP", "name": "g", "principal": "User:alice", "operation": "READ"}]}"#,
            )
            .expect("binding"),
        )
        .await
        .expect("add");
    s.acls.reload().await.expect("reload");
    let (c, ops) = code(send(&s.broker, ALICE, ApiKey::DescribeGroups, 5, body).await);
    assert_eq!(c, 0);
    // READ implies DESCRIBE; DELETE is not granted.
    assert_eq!(
        ops,
        (1 << Operation::Read.code()) | (1 << Operation::Describe.code())
    );
}

#[tokio::test]
async fn init_producer_id_passes_with_write_on_any_topic_and_cluster_ops_need_describe() {
    let bindings = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "WRITE"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let (body, _) = sample(ApiKey::InitProducerId, 4, s.topic_id);
    let Some(ResponseBody::InitProducerId(r)) =
        send(&s.broker, ALICE, ApiKey::InitProducerId, 4, body).await
    else {
        panic!("no answer")
    };
    assert_eq!(r.error_code, 0);
    assert!(r.producer_id >= 0);
    let (body, _) = sample(ApiKey::DescribeCluster, 1, s.topic_id);
    let Some(ResponseBody::DescribeCluster(d)) =
        send(&s.broker, ALICE, ApiKey::DescribeCluster, 1, body.clone()).await
    else {
        panic!("no answer")
    };
    assert_eq!(d.error_code, 0);
    assert_eq!(d.cluster_authorized_operations, 0);
    let s = setup(Some(EVERYTHING), false).await;
    let Some(ResponseBody::DescribeCluster(d)) =
        send(&s.broker, ALICE, ApiKey::DescribeCluster, 1, body).await
    else {
        panic!("no answer")
    };
    assert_eq!(
        d.cluster_authorized_operations,
        api::operations_bitfield(
            api::supported_operations(ResourceType::Cluster)
                .iter()
                .copied()
        )
    );
}

#[tokio::test]
async fn authorized_operations_are_the_principals_own_and_everything_without_the_layer() {
    let metadata: RequestBody = metadata_request::MetadataRequest {
        topics: Some(vec![metadata_request::MetadataRequestTopic {
            name: Some(ByteString::from_static("t")),
            ..Default::default()
        }]),
        allow_auto_topic_creation: false,
        include_topic_authorized_operations: true,
        include_cluster_authorized_operations: true,
        ..Default::default()
    }
    .into();
    let bits = |ops: &[Operation]| api::operations_bitfield(ops.iter().copied());
    let read_t = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "READ"}
    ]}"#;
    let s = setup(Some(read_t), false).await;
    let Some(ResponseBody::Metadata(m)) =
        send(&s.broker, ALICE, ApiKey::Metadata, 10, metadata.clone()).await
    else {
        panic!("no metadata")
    };
    assert_eq!(m.topics[0].error_code, 0);
    assert_eq!(
        m.topics[0].topic_authorized_operations,
        bits(&[Operation::Read, Operation::Describe])
    );
    assert_eq!(m.cluster_authorized_operations, 0);

    // Without the layer (authorization off): every supported operation, as Kafka.
    let plain = setup(None, true).await;
    let Some(ResponseBody::Metadata(m)) =
        send(&plain.broker, ALICE, ApiKey::Metadata, 10, metadata).await
    else {
        panic!("no metadata")
    };
    assert_eq!(
        m.topics[0].topic_authorized_operations,
        api::all_operations(ResourceType::Topic)
    );
    assert_eq!(
        m.cluster_authorized_operations,
        api::all_operations(ResourceType::Cluster)
    );
    let (body, _) = sample(ApiKey::DescribeCluster, 1, plain.topic_id);
    let Some(ResponseBody::DescribeCluster(d)) =
        send(&plain.broker, ALICE, ApiKey::DescribeCluster, 1, body).await
    else {
        panic!("no answer")
    };
    assert_eq!(
        d.cluster_authorized_operations,
        api::all_operations(ResourceType::Cluster)
    );
}

#[tokio::test]
async fn create_topics_shows_configs_only_with_describe_configs() {
    let create = |name: &'static str| -> RequestBody {
        create_topics_request::CreateTopicsRequest {
            topics: vec![create_topics_request::CreatableTopic {
                name: ByteString::from_static(name),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 1000,
            ..Default::default()
        }
        .into()
    };
    let bindings = r#"{"bindings": [
      {"resource_type": "CLUSTER", "name": "kafka-cluster", "principal": "User:alice", "operation": "CREATE"},
      {"resource_type": "TOPIC", "name": "seen", "principal": "User:alice", "operation": "DESCRIBE_CONFIGS"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    for (name, shown) in [("seen", true), ("blind", false)] {
        let Some(ResponseBody::CreateTopics(r)) =
            send(&s.broker, ALICE, ApiKey::CreateTopics, 5, create(name)).await
        else {
            panic!("no answer")
        };
        assert_eq!(r.topics[0].error_code, 0, "{name}");
        assert_eq!(r.topics[0].configs.is_some(), shown, "{name}: {r:?}");
        assert_eq!(
            r.topics[0].topic_config_error_code,
            if shown { 0 } else { 29 },
            "{name}"
        );
        assert!(s.store.topic(name).await.expect("lookup").is_some());
    }
}

#[test]
fn host_text_is_the_peer_address() {
    let mut s = session(ALICE);
    let mut h = HostText::default();
    assert_eq!(h.of(&s), "10.0.0.1");
    s.peer = "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:1"
        .parse()
        .expect("addr");
    let mut h = HostText::default();
    assert_eq!(h.of(&s), s.peer.ip().to_string());
}

/// The layer's own cost per request on the common path (a Produce and a Fetch of one
/// topic, allowed, among 200 bindings), printed; run with
/// `cargo test --release -p kafka-broker --lib layer_cost -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn layer_cost() {
    let mut bindings = String::from(r#"{"bindings": ["#);
    for i in 0..200 {
        bindings.push_str(&format!(
            r#"{{"resource_type": "TOPIC", "name": "tenant{i}-", "pattern": "PREFIXED", "principal": "User:user{i}", "operation": "ALL"}},"#
        ));
    }
    bindings.push_str(
        r#"{"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "ALL"}]}"#,
    );
    let s = setup(Some(&bindings), false).await;
    let layer = s.layer.clone().expect("layer");
    let mut session = session(ALICE);
    for key in [ApiKey::Produce, ApiKey::Fetch] {
        let (body, _) = sample(key, 9, s.topic_id);
        let n = 200_000u32;
        let mut requests: Vec<Request> = (0..n)
            .map(|_| Request {
                api: key,
                version: 9,
                correlation_id: 1,
                client_id: None,
                body: body.clone(),
                frame_len: 100,
                received: Instant::now(),
                notes: crate::pipeline::Notes::default(),
            })
            .collect();
        let start = Instant::now();
        for r in &mut requests {
            let v = layer.on_request(&mut session, r).await;
            assert!(matches!(v, Verdict::Pass));
        }
        let per = start.elapsed() / n;
        println!("{key:?}: {per:?} per request in the authorization layer");
    }
}

#[tokio::test]
async fn authorization_is_on_when_a_listener_authenticates_unless_configured() {
    use crate::server::{BoundListener, authorization_enabled};
    let bound = |protocol| async move {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        BoundListener::new(tcp, Listener::new("L", protocol))
    };
    let plain = vec![bound(SecurityProtocol::Plaintext).await];
    let sasl = vec![
        bound(SecurityProtocol::Plaintext).await,
        bound(SecurityProtocol::SaslPlaintext).await,
    ];
    let mut config = BrokerConfig::default();
    assert!(!authorization_enabled(&config, &plain));
    assert!(authorization_enabled(&config, &sasl));
    config.authorization.enabled = Some(false);
    assert!(!authorization_enabled(&config, &sasl));
    config.authorization.enabled = Some(true);
    assert!(authorization_enabled(&config, &plain));
}

#[tokio::test]
async fn a_transactional_produce_needs_write_on_its_transactional_id() {
    let produce: RequestBody = produce_request::ProduceRequest {
        transactional_id: Some(ByteString::from_static("tx")),
        acks: -1,
        timeout_ms: 1000,
        topic_data: vec![produce_request::TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![
                produce_request::PartitionProduceData {
                    index: 0,
                    records: Some(batch()),
                    ..Default::default()
                },
                produce_request::PartitionProduceData {
                    index: 1,
                    records: Some(batch()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into();
    let topic_only = r#"{"bindings": [
      {"resource_type": "TOPIC", "name": "t", "principal": "User:alice", "operation": "WRITE"}
    ]}"#;
    let s = setup(Some(topic_only), false).await;
    let Some(ResponseBody::Produce(p)) =
        send(&s.broker, ALICE, ApiKey::Produce, 9, produce.clone()).await
    else {
        panic!("no answer")
    };
    let codes: Vec<i16> = p.responses[0]
        .partition_responses
        .iter()
        .map(|r| r.error_code)
        .collect();
    assert_eq!(
        codes,
        [ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code(); 2]
    );
    assert_eq!(
        s.store.watermarks("t", 0).await.expect("t").high_watermark,
        0
    );

    // With the transactional id but not the topic: the topic's error.
    let tx_only = r#"{"bindings": [
      {"resource_type": "TRANSACTIONAL_ID", "name": "tx", "principal": "User:alice", "operation": "WRITE"}
    ]}"#;
    let s = setup(Some(tx_only), false).await;
    let Some(ResponseBody::Produce(p)) = send(&s.broker, ALICE, ApiKey::Produce, 9, produce).await
    else {
        panic!("no answer")
    };
    assert!(
        p.responses[0]
            .partition_responses
            .iter()
            .all(|r| r.error_code == ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())
    );
}

#[tokio::test]
async fn list_transactions_hides_unauthorized_ids() {
    use list_transactions_response as lt;
    let bindings = r#"{"bindings": [
      {"resource_type": "TRANSACTIONAL_ID", "name": "app-", "pattern": "PREFIXED",
       "principal": "User:alice", "operation": "DESCRIBE"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let principal = format!("User:{ALICE}");
    let session = session(ALICE);
    let mut host = HostText::default();
    let layer = s.layer.as_ref().expect("layer");
    let d = layer.decider(s.acls.acls(), &principal, host.of(&session));
    let state = |id: &'static str| lt::TransactionState {
        transactional_id: ByteString::from_static(id),
        producer_id: 1,
        transaction_state: ByteString::from_static("Ongoing"),
        ..Default::default()
    };
    let mut body: ResponseBody = lt::ListTransactionsResponse {
        transaction_states: vec![state("app-1"), state("other"), state("app-2")],
        ..Default::default()
    }
    .into();
    hide(&d, &mut body);
    let ResponseBody::ListTransactions(l) = body else {
        panic!("not ListTransactions")
    };
    let ids: Vec<&str> = l
        .transaction_states
        .iter()
        .map(|t| &*t.transactional_id)
        .collect();
    assert_eq!(ids, ["app-1", "app-2"]);
}

/// A source shaped like the Iggy permissions of a user who may create topics in the
/// default stream only: it grants on its own for topics and the cluster, allows CREATE on
/// the cluster (the default stream), and any operation on topics named `default.*` (the
/// ones a topic map would route to the default stream); it has no say on groups.
#[derive(Debug)]
struct DefaultStreamOnly;

#[async_trait]
impl Authorizer for DefaultStreamOnly {
    fn name(&self) -> &'static str {
        "default-stream-only"
    }

    fn grants(&self, resource_type: ResourceType) -> bool {
        matches!(resource_type, ResourceType::Topic | ResourceType::Cluster)
    }

    fn authorize(
        &self,
        _caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        match resource_type {
            ResourceType::Cluster => operation == Operation::Create,
            ResourceType::Topic => name.starts_with("default."),
            _ => true,
        }
    }

    fn authorize_any(
        &self,
        _caller: &Caller<'_>,
        _operation: Operation,
        _resource_type: ResourceType,
    ) -> bool {
        true
    }
}

/// An authorization layer over `bindings` with [`DefaultStreamOnly`] as its other source.
async fn with_default_stream_source(bindings: &str, allow_everyone: bool) -> Authorization {
    let acl_store = Arc::new(
        MemoryAclStore::with_bindings(parse_bindings(bindings).expect("bindings")).expect("store"),
    );
    let acls = Arc::new(AclAuthorizer::new(acl_store, allow_everyone));
    acls.reload().await.expect("reload");
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    Authorization::new(
        acls,
        vec![Arc::new(DefaultStreamOnly)],
        vec!["User:admin".into()],
        store,
        false,
        1000,
    )
}

#[tokio::test]
async fn a_source_that_grants_decides_where_no_binding_names_the_resource() {
    let layer = with_default_stream_source(r#"{"bindings":[]}"#, false).await;
    let principal = format!("User:{ALICE}");
    let session = session(ALICE);
    let mut host = HostText::default();
    let d = layer.decider(layer.acls.acls(), &principal, host.of(&session));
    // Topics and the cluster: the source's permissions are a grant of their own.
    assert!(d.allows(Operation::Read, ResourceType::Topic, "default.orders"));
    assert!(!d.allows(Operation::Read, ResourceType::Topic, "other.orders"));
    assert!(d.allows(Operation::Create, ResourceType::Cluster, CLUSTER_NAME));
    assert!(!d.allows(Operation::Alter, ResourceType::Cluster, CLUSTER_NAME));
    // Groups and transactional ids: the source has no say, nothing opens them.
    assert!(!d.allows(Operation::Read, ResourceType::Group, "g"));
    assert!(!d.allows(Operation::Write, ResourceType::TransactionalId, "x"));

    // A binding on the topic takes it out of the source's sole say: the binding must
    // allow too (and the source still restricts).
    let layer = with_default_stream_source(
        r#"{"bindings": [
          {"resource_type": "TOPIC", "name": "default.orders", "principal": "User:bob", "operation": "READ"},
          {"resource_type": "TOPIC", "name": "other.", "pattern": "PREFIXED", "principal": "User:alice", "operation": "READ"}
        ]}"#,
        false,
    )
    .await;
    let d = layer.decider(layer.acls.acls(), &principal, host.of(&session));
    assert!(!d.allows(Operation::Read, ResourceType::Topic, "default.orders"));
    assert!(!d.allows(Operation::Read, ResourceType::Topic, "other.orders"));
}

#[tokio::test]
async fn creating_a_topic_through_the_cluster_grant_is_judged_by_the_topics_own_place() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
    let layer = with_default_stream_source(r#"{"bindings":[]}"#, false).await;
    let principal = format!("User:{ALICE}");
    let session = session(ALICE);
    let mut host = HostText::default();
    let d = layer.decider(layer.acls.acls(), &principal, host.of(&session));
    let body: RequestBody = CreateTopicsRequest {
        topics: ["default.new", "other.new"]
            .into_iter()
            .map(|n| CreatableTopic {
                name: ByteString::from_static(n),
                num_partitions: 1,
                replication_factor: -1,
                ..Default::default()
            })
            .collect(),
        timeout_ms: 1000,
        ..Default::default()
    }
    .into();
    let checks = api::required(&body).expect("CreateTopics has a rule");
    let verdicts: Vec<bool> = checks
        .iter()
        .zip(["default.new", "other.new"])
        .map(|(c, name)| d.passes(c, ResourceType::Topic, name))
        .collect();
    // CREATE on the cluster is granted (the default stream), but `other.new` would be
    // created in a place the source refuses.
    assert_eq!(verdicts, [true, false]);
}

#[tokio::test]
async fn allow_everyone_does_not_open_acl_management_or_cluster_actions() {
    let s = setup(Some(r#"{"bindings":[]}"#), true).await;
    let principal = format!("User:{ALICE}");
    let session = session(ALICE);
    let mut host = HostText::default();
    let layer = s.layer.as_ref().expect("layer");
    let d = layer.decider(s.acls.acls(), &principal, host.of(&session));
    assert!(d.allows(Operation::Write, ResourceType::Topic, "t"));
    assert!(d.allows(Operation::Read, ResourceType::Group, "g"));
    for op in [
        Operation::Alter,
        Operation::AlterConfigs,
        Operation::ClusterAction,
    ] {
        assert!(
            !d.allows(op, ResourceType::Cluster, CLUSTER_NAME),
            "{op:?} on the cluster opened by allow-everyone"
        );
    }
}

#[tokio::test]
async fn describe_transactions_shows_only_topics_the_caller_may_describe() {
    use describe_transactions_response as dt;
    // The request asks for its transactions' topics to be filtered on the way out.
    let request: RequestBody = describe_transactions_request::DescribeTransactionsRequest {
        transactional_ids: vec![ByteString::from_static("app-1")],
        ..Default::default()
    }
    .into();
    let checks = api::required(&request).expect("a known API");
    assert!(
        checks
            .iter()
            .any(|c| matches!(c.target, Target::EachListed(ResourceType::Topic))),
        "{checks:?}"
    );

    let bindings = r#"{"bindings": [
      {"resource_type": "TRANSACTIONAL_ID", "name": "app-1", "pattern": "LITERAL",
       "principal": "User:alice", "operation": "DESCRIBE"},
      {"resource_type": "TOPIC", "name": "mine-", "pattern": "PREFIXED",
       "principal": "User:alice", "operation": "DESCRIBE"}
    ]}"#;
    let s = setup(Some(bindings), false).await;
    let principal = format!("User:{ALICE}");
    let session = session(ALICE);
    let mut host = HostText::default();
    let layer = s.layer.as_ref().expect("layer");
    let d = layer.decider(s.acls.acls(), &principal, host.of(&session));
    let topic = |name: &'static str| dt::TopicData {
        topic: ByteString::from_static(name),
        partitions: vec![0, 1],
        ..Default::default()
    };
    let mut body: ResponseBody = dt::DescribeTransactionsResponse {
        transaction_states: vec![dt::TransactionState {
            transactional_id: ByteString::from_static("app-1"),
            transaction_state: ByteString::from_static("Ongoing"),
            topics: vec![topic("mine-a"), topic("payroll"), topic("mine-b")],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into();
    hide(&d, &mut body);
    let ResponseBody::DescribeTransactions(b) = body else {
        panic!("not DescribeTransactions")
    };
    let topics: Vec<&str> = b.transaction_states[0]
        .topics
        .iter()
        .map(|t| &*t.topic)
        .collect();
    assert_eq!(topics, ["mine-a", "mine-b"]);
}
