//! Broker-level tests: every advertised API at every advertised version goes through the
//! firewall, the handler and the encoder, and the answer decodes as the client would read
//! it. This catches a handler filling a field that an older version cannot carry.

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::dispatch::{self, Outcome};
use crate::handlers::advertised_all;
use crate::server::Stores;
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::{LogStore, NewTopic, TopicConfig};
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::*;
use kafka_protocol::{ApiKey, ByteString, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::sync::Arc;

fn peer() -> std::net::SocketAddr {
    "127.0.0.1:1".parse().expect("addr")
}

async fn broker() -> (Broker, u128) {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let info = store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 2,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .expect("topic");
    let stores = Stores {
        log: store.clone(),
        offsets: store,
    };
    // The pipeline the server builds with metrics on, so every test request also passes
    // through the metrics layer.
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let pipeline = crate::pipeline::Pipeline::new(vec![
        Arc::new(crate::metrics::MetricsLayer::new(metrics)),
        Arc::new(crate::pipeline::client_info::ClientInfo),
    ]);
    (
        Broker::new(BrokerConfig::default(), stores, pipeline),
        info.id,
    )
}

fn request_for(key: ApiKey, topic_id: u128, v: i16) -> RequestBody {
    let t = ByteString::from_static("t");
    match key {
        ApiKey::Metadata => MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(t),
                ..Default::default()
            }]),
            allow_auto_topic_creation: true,
            ..Default::default()
        }
        .into(),
        ApiKey::Produce => ProduceRequest {
            acks: 1,
            timeout_ms: 1000,
            ..Default::default()
        }
        .into(),
        ApiKey::Fetch => FetchRequest {
            max_wait_ms: 0,
            max_bytes: 1 << 20,
            topics: vec![FetchTopic {
                topic: t,
                topic_id: Uuid::from_u128(topic_id),
                partitions: vec![FetchPartition {
                    partition: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::ListOffsets => ListOffsetsRequest {
            topics: vec![ListOffsetsTopic {
                name: t,
                partitions: vec![ListOffsetsPartition {
                    partition_index: 1,
                    timestamp: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::CreateTopics => CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: ByteString::from_static("new-topic"),
                num_partitions: 3,
                replication_factor: 1,
                ..Default::default()
            }],
            validate_only: true,
            ..Default::default()
        }
        .into(),
        ApiKey::ApiVersions => api_versions_request::ApiVersionsRequest::default().into(),
        ApiKey::DeleteTopics => delete_topics_request::DeleteTopicsRequest::default().into(),
        ApiKey::DeleteRecords => delete_records_request::DeleteRecordsRequest::default().into(),
        ApiKey::InitProducerId => init_producer_id_request::InitProducerIdRequest {
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        }
        .into(),
        ApiKey::OffsetForLeaderEpoch => {
            offset_for_leader_epoch_request::OffsetForLeaderEpochRequest::default().into()
        }
        ApiKey::DescribeConfigs => describe_configs_request::DescribeConfigsRequest {
            resources: vec![describe_configs_request::DescribeConfigsResource {
                resource_type: 2,
                resource_name: ByteString::from_static("t"),
                configuration_keys: None,
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::AlterConfigs => alter_configs_request::AlterConfigsRequest::default().into(),
        ApiKey::CreatePartitions => {
            create_partitions_request::CreatePartitionsRequest::default().into()
        }
        ApiKey::IncrementalAlterConfigs => {
            incremental_alter_configs_request::IncrementalAlterConfigsRequest::default().into()
        }
        ApiKey::DescribeCluster => {
            describe_cluster_request::DescribeClusterRequest::default().into()
        }
        ApiKey::FindCoordinator if v >= 4 => find_coordinator_request::FindCoordinatorRequest {
            coordinator_keys: vec![ByteString::from_static("g")],
            ..Default::default()
        }
        .into(),
        ApiKey::FindCoordinator => find_coordinator_request::FindCoordinatorRequest {
            key: ByteString::from_static("g"),
            ..Default::default()
        }
        .into(),
        // Unknown members and generations: answered at once with an error, no waiting.
        ApiKey::JoinGroup => join_group_request::JoinGroupRequest {
            group_id: ByteString::from_static("g"),
            session_timeout_ms: 10,
            rebalance_timeout_ms: 10,
            member_id: ByteString::from_static("nobody"),
            protocol_type: ByteString::from_static("consumer"),
            ..Default::default()
        }
        .into(),
        ApiKey::SyncGroup => sync_group_request::SyncGroupRequest {
            group_id: ByteString::from_static("g"),
            generation_id: 3,
            member_id: ByteString::from_static("nobody"),
            ..Default::default()
        }
        .into(),
        ApiKey::Heartbeat => heartbeat_request::HeartbeatRequest {
            group_id: ByteString::from_static("g"),
            generation_id: 3,
            member_id: ByteString::from_static("nobody"),
            ..Default::default()
        }
        .into(),
        ApiKey::LeaveGroup if v >= 3 => leave_group_request::LeaveGroupRequest {
            group_id: ByteString::from_static("g"),
            members: vec![leave_group_request::MemberIdentity {
                member_id: ByteString::from_static("nobody"),
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::LeaveGroup => leave_group_request::LeaveGroupRequest {
            group_id: ByteString::from_static("g"),
            member_id: ByteString::from_static("nobody"),
            ..Default::default()
        }
        .into(),
        ApiKey::DescribeGroups => describe_groups_request::DescribeGroupsRequest {
            groups: vec![ByteString::from_static("g")],
            ..Default::default()
        }
        .into(),
        ApiKey::ListGroups => list_groups_request::ListGroupsRequest::default().into(),
        ApiKey::DeleteGroups => delete_groups_request::DeleteGroupsRequest {
            groups_names: vec![ByteString::from_static("g")],
            ..Default::default()
        }
        .into(),
        ApiKey::OffsetCommit => offset_commit_request::OffsetCommitRequest {
            group_id: ByteString::from_static("g"),
            generation_id_or_member_epoch: -1,
            topics: vec![offset_commit_request::OffsetCommitRequestTopic {
                name: ByteString::from_static("t"),
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
        ApiKey::OffsetFetch if v >= 8 => offset_fetch_request::OffsetFetchRequest {
            groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
                group_id: ByteString::from_static("g"),
                topics: None,
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::OffsetFetch => offset_fetch_request::OffsetFetchRequest {
            group_id: ByteString::from_static("g"),
            topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
                name: ByteString::from_static("t"),
                partition_indexes: vec![0, 1],
                ..Default::default()
            }]),
            ..Default::default()
        }
        .into(),
        ApiKey::OffsetDelete => offset_delete_request::OffsetDeleteRequest {
            group_id: ByteString::from_static("g"),
            ..Default::default()
        }
        .into(),
        ApiKey::DescribeClientQuotas => {
            describe_client_quotas_request::DescribeClientQuotasRequest {
                components: vec![describe_client_quotas_request::ComponentData {
                    entity_type: ByteString::from_static("client-id"),
                    match_type: 2,
                    match_: None,
                    ..Default::default()
                }],
                ..Default::default()
            }
            .into()
        }
        ApiKey::AlterClientQuotas => alter_client_quotas_request::AlterClientQuotasRequest {
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
            validate_only: true,
            ..Default::default()
        }
        .into(),
        ApiKey::SaslHandshake => sasl_handshake_request::SaslHandshakeRequest {
            mechanism: ByteString::from_static("PLAIN"),
        }
        .into(),
        ApiKey::SaslAuthenticate => {
            sasl_authenticate_request::SaslAuthenticateRequest::default().into()
        }
        ApiKey::DescribeUserScramCredentials => {
            describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest::default()
                .into()
        }
        ApiKey::AlterUserScramCredentials => {
            alter_user_scram_credentials_request::AlterUserScramCredentialsRequest::default().into()
        }
        ApiKey::DescribeAcls => describe_acls_request::DescribeAclsRequest {
            resource_type_filter: 1,
            pattern_type_filter: 1,
            operation: 1,
            permission_type: 1,
            ..Default::default()
        }
        .into(),
        ApiKey::CreateAcls => create_acls_request::CreateAclsRequest {
            creations: vec![create_acls_request::AclCreation {
                resource_type: 2,
                resource_name: ByteString::from_static("t"),
                resource_pattern_type: 3,
                principal: ByteString::from_static("User:alice"),
                host: ByteString::from_static("*"),
                operation: 3,
                permission_type: 3,
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        ApiKey::DeleteAcls => delete_acls_request::DeleteAclsRequest {
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
        ApiKey::AddPartitionsToTxn => {
            add_partitions_to_txn_request::AddPartitionsToTxnRequest::default().into()
        }
        ApiKey::AddOffsetsToTxn => {
            add_offsets_to_txn_request::AddOffsetsToTxnRequest::default().into()
        }
        ApiKey::EndTxn => end_txn_request::EndTxnRequest::default().into(),
        ApiKey::WriteTxnMarkers => {
            write_txn_markers_request::WriteTxnMarkersRequest::default().into()
        }
        ApiKey::TxnOffsetCommit => {
            txn_offset_commit_request::TxnOffsetCommitRequest::default().into()
        }
        ApiKey::DescribeTransactions => {
            describe_transactions_request::DescribeTransactionsRequest::default().into()
        }
        ApiKey::ListTransactions => {
            list_transactions_request::ListTransactionsRequest::default().into()
        }
        other => panic!("no sample request for {other:?}"),
    }
}

#[tokio::test]
async fn every_advertised_api_answers_at_every_version() {
    let (broker, id) = broker().await;
    let mut checked = 0;
    for (key, range) in advertised_all() {
        for v in range.min..=range.max {
            let header = RequestHeader {
                request_api_key: key.as_i16(),
                request_api_version: v,
                correlation_id: 1000 + i32::from(v),
                client_id: Some(ByteString::from_static("test")),
                ..Default::default()
            };
            let frame = encode_request(&header, &request_for(key, id, v)).expect("request encodes");
            let out = dispatch::handle(&broker, peer(), frame.slice(4..)).await;
            let Outcome::Respond(resp) = out else {
                panic!("{key:?} v{v}: no response ({out:?})");
            };
            let bytes: Bytes = resp.to_bytes();
            let (h, body) = decode_response(key, v, &bytes.slice(4..))
                .unwrap_or_else(|e| panic!("{key:?} v{v}: response does not decode: {e}"));
            assert_eq!(h.correlation_id, 1000 + i32::from(v));
            assert_eq!(body.api_key(), key);
            if let ResponseBody::Produce(p) = &body {
                // Versions 0-2 are advertised but refused: nothing to refuse without topics.
                assert!(p.responses.is_empty());
            }
            checked += 1;
        }
    }
    assert!(checked >= 90, "only {checked} combinations");
}

#[tokio::test]
async fn api_versions_at_an_unknown_version_gets_the_v0_error_answer() {
    let (broker, _) = broker().await;
    let mut frame = Vec::new();
    frame.extend_from_slice(&18i16.to_be_bytes());
    frame.extend_from_slice(&77i16.to_be_bytes());
    frame.extend_from_slice(&5i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    let Outcome::Respond(resp) = dispatch::handle(&broker, peer(), Bytes::from(frame)).await else {
        panic!("no answer");
    };
    let bytes = resp.to_bytes();
    let (_, body) = decode_response(ApiKey::ApiVersions, 0, &bytes.slice(4..)).expect("v0 shape");
    let ResponseBody::ApiVersions(body) = body else {
        panic!("not ApiVersions")
    };
    assert_eq!(body.error_code, ErrorCode::UNSUPPORTED_VERSION.code());
    assert!(
        body.api_keys
            .iter()
            .any(|k| k.api_key == 0 && k.min_version == 0)
    );
    assert!(
        body.api_keys
            .iter()
            .any(|k| k.api_key == 11 && k.max_version == 9)
    );
    for key in [17, 36, 50, 51] {
        assert!(
            body.api_keys.iter().any(|k| k.api_key == key),
            "SASL and SCRAM credential API {key} is advertised"
        );
    }
}

#[tokio::test]
async fn unknown_keys_and_versions_close_the_connection() {
    let (broker, _) = broker().await;
    for (key, version) in [(3i16, 99i16), (11, 10), (17, 0), (999, 0)] {
        let mut frame = Vec::new();
        frame.extend_from_slice(&key.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        let out = dispatch::handle(&broker, peer(), Bytes::from(frame)).await;
        assert!(
            matches!(out, Outcome::Close),
            "key {key} v{version}: {out:?}"
        );
    }
}

fn produce_frame(version: i16, records: Bytes, acks: i16) -> Bytes {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let header = RequestHeader {
        request_api_key: ApiKey::Produce.as_i16(),
        request_api_version: version,
        correlation_id: 7,
        client_id: None,
        ..Default::default()
    };
    let body = ProduceRequest {
        acks,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(records),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    encode_request(&header, &body.into())
        .expect("encodes")
        .slice(4..)
}

fn batch(opts: kafka_records::BatchOptions, n: usize) -> Bytes {
    let records: Vec<kafka_records::NewRecord> = (0..n)
        .map(|i| kafka_records::NewRecord {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    kafka_records::encode_batch(&opts, &records, &mut out).expect("batch");
    out.freeze()
}

async fn produce(broker: &Broker, version: i16, records: Bytes) -> (i16, i64) {
    let Outcome::Respond(r) =
        dispatch::handle(broker, peer(), produce_frame(version, records, 1)).await
    else {
        panic!("no produce response")
    };
    let (_, body) =
        decode_response(ApiKey::Produce, version, &r.to_bytes().slice(4..)).expect("decodes");
    let ResponseBody::Produce(p) = body else {
        panic!("not produce")
    };
    let part = &p.responses[0].partition_responses[0];
    (part.error_code, part.base_offset)
}

#[tokio::test]
async fn idempotent_retries_are_not_appended_twice() {
    let (broker, _) = broker().await;
    let opts = kafka_records::BatchOptions {
        producer_id: 42,
        producer_epoch: 0,
        base_sequence: 0,
        ..Default::default()
    };
    assert_eq!(produce(&broker, 9, batch(opts, 3)).await, (0, 0));
    // The same batch again (a retry after a lost response): same offset, nothing appended.
    assert_eq!(produce(&broker, 9, batch(opts, 3)).await, (0, 0));
    let next = kafka_records::BatchOptions {
        base_sequence: 3,
        ..opts
    };
    assert_eq!(produce(&broker, 9, batch(next, 2)).await, (0, 3));
    let gap = kafka_records::BatchOptions {
        base_sequence: 9,
        ..opts
    };
    assert_eq!(
        produce(&broker, 9, batch(gap, 1)).await.0,
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code()
    );
    let w = broker
        .stores
        .log
        .watermarks("t", 0)
        .await
        .expect("watermarks");
    assert_eq!(w.high_watermark, 5);
}

#[tokio::test]
async fn produce_refuses_what_it_cannot_store_faithfully() {
    let (broker, _) = broker().await;
    let plain = kafka_records::BatchOptions::default();
    // Legacy versions and zstd before v7.
    assert_eq!(
        produce(&broker, 2, batch(plain, 1)).await.0,
        ErrorCode::UNSUPPORTED_VERSION.code()
    );
    let tx = kafka_records::BatchOptions {
        transactional: true,
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 0,
        ..plain
    };
    // Transactional records need a transactional id; clients write no control batches.
    assert_eq!(
        produce(&broker, 9, batch(tx, 1)).await.0,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
    );
    let control = kafka_records::BatchOptions {
        transactional: false,
        control: true,
        ..tx
    };
    assert_eq!(
        produce(&broker, 9, batch(control, 1)).await.0,
        ErrorCode::INVALID_RECORD.code()
    );
    let zstd = kafka_records::BatchOptions {
        compression: kafka_records::Compression::Zstd,
        ..plain
    };
    assert_eq!(
        produce(&broker, 6, batch(zstd, 1)).await.0,
        ErrorCode::UNSUPPORTED_COMPRESSION_TYPE.code()
    );
    assert_eq!(produce(&broker, 7, batch(zstd, 1)).await, (0, 0));
    // A flipped bit fails the CRC; a cut batch is corrupt.
    let mut bad = batch(plain, 2).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        produce(&broker, 9, Bytes::from(bad)).await.0,
        ErrorCode::CORRUPT_MESSAGE.code()
    );
    let cut = batch(plain, 2).slice(..30);
    assert_eq!(
        produce(&broker, 9, cut).await.0,
        ErrorCode::CORRUPT_MESSAGE.code()
    );
    // acks=0: nothing comes back.
    let out = dispatch::handle(&broker, peer(), produce_frame(9, batch(plain, 1), 0)).await;
    assert!(matches!(out, Outcome::NoResponse));
}

#[tokio::test]
async fn stored_batches_carry_leader_epoch_zero() {
    let (broker, _) = broker().await;
    // Java producers send -1, librdkafka 0; others anything.
    for (i, epoch) in [-1, 0, 7].into_iter().enumerate() {
        let sent = batch(
            kafka_records::BatchOptions {
                partition_leader_epoch: epoch,
                ..Default::default()
            },
            2,
        );
        assert_eq!(produce(&broker, 9, sent.clone()).await, (0, 2 * i as i64));
        let read = broker
            .stores
            .log
            .read("t", 0, 2 * i as i64, 1 << 20)
            .await
            .expect("read");
        let stored = read.batches.last().expect("a batch");
        let header = kafka_records::BatchHeader::parse(stored).expect("header");
        assert_eq!(header.partition_leader_epoch, 0, "sent with epoch {epoch}");
        // Apart from the base offset and the epoch, the stored batch is what was sent,
        // and its CRC still holds.
        assert_eq!(stored[16..], sent[16..], "sent with epoch {epoch}");
        kafka_records::RecordBatch::decode(stored, &kafka_records::DecodeLimits::default())
            .expect("stored batch decodes");
    }
}

/// A TxnOffsetCommit between its verification and its store write holds back the
/// completion of its group's shard: the marker then finds the offsets pending and commits
/// them, instead of passing before they are stored and leaving them pending for good.
#[tokio::test]
async fn a_group_shard_completes_only_after_a_commit_being_verified_is_stored() {
    use kafka_store::CommittedOffset;
    let (broker, _) = broker().await;
    let shard = kafka_store::cluster::group_shard("g");
    broker.groups.wait_shards(1u32 << shard).await;
    assert!(broker.groups.is_loaded("g"));
    // As the TxnOffsetCommit handler does: the gate, then (verification, then) the store.
    let gate = broker.groups.txn_commit_gate("g").await;
    let groups = broker.groups.clone();
    let marker = tokio::spawn(async move { groups.complete_txn_offsets(shard, 7, true).await });
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        !marker.is_finished(),
        "the marker completed the shard while a commit was being verified"
    );
    let offset = CommittedOffset {
        offset: 42,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp: 0,
    };
    broker
        .groups
        .add_pending_offsets("g", 7, vec![("t".into(), 0, offset)])
        .await
        .expect("stored");
    drop(gate);
    assert_eq!(marker.await.expect("marker task"), ErrorCode::NONE);
    let committed = broker
        .stores
        .offsets
        .fetch("g", "t", 0)
        .await
        .expect("fetch");
    assert_eq!(committed.map(|c| c.offset), Some(42));
}
