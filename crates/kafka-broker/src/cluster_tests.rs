//! Routing by a live view: a broker whose membership is a view the test sets (two or
//! three gateways), driven through the dispatcher as a client would.

use crate::broker::Broker;
use crate::cluster::{coordinator, leader};
use crate::config::BrokerConfig;
use crate::dispatch::{self, Outcome};
use crate::pipeline::authorization::tests::batch;
use crate::server::Stores;
use crate::session::{Listener, SecurityProtocol, Session};
use crate::store::cluster::{LiveView, ManualMembership, Member, MemberListener};
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::{LogStore, NewTopic, TopicConfig};
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::*;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;

const PARTITIONS: i32 = 24;

fn member(node_id: i32) -> Member {
    Member {
        node_id,
        epoch: 1,
        listeners: vec![
            MemberListener {
                name: "PLAINTEXT".into(),
                host: format!("plain-{node_id}"),
                port: 9092,
            },
            MemberListener {
                name: "SSL".into(),
                host: format!("ssl-{node_id}"),
                port: 9093,
            },
        ],
    }
}

/// The membership of node `me` in a view of `ids`, set by the test.
fn membership(me: i32, ids: &[i32]) -> Arc<ManualMembership> {
    Arc::new(ManualMembership::new(member(me), members(ids)))
}

fn members(ids: &[i32]) -> Vec<Member> {
    ids.iter().map(|&id| member(id)).collect()
}

struct Gateway {
    broker: Broker,
    store: Arc<MemoryStore>,
    fake: Arc<ManualMembership>,
}

/// Gateway node 1 of `ids`, with the PLAINTEXT listener advertising `plain-1:9092`.
async fn gateway(ids: &[i32]) -> Gateway {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: PARTITIONS,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .expect("topic");
    let stores = Stores {
        log: store.clone(),
        offsets: store.clone(),
    };
    let config = BrokerConfig {
        node_id: 1,
        advertised_host: "plain-1".into(),
        advertised_port: 9092,
        ..BrokerConfig::default()
    };
    let mut broker = Broker::new(config, stores, crate::pipeline::Pipeline::default());
    let fake = membership(1, ids);
    broker.set_membership(fake.clone());
    Gateway {
        broker,
        store,
        fake,
    }
}

fn session(listener: &str) -> Session {
    let l = if listener == "SSL" {
        Listener::new("SSL", SecurityProtocol::Ssl).advertising("ssl-1", 9093)
    } else {
        Listener::plaintext()
    };
    Session::new(0, l, "127.0.0.1:1".parse().expect("addr"))
}

async fn call_on(gw: &Gateway, listener: &str, v: i16, body: RequestBody) -> ResponseBody {
    let key = body.api_key();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: v,
        correlation_id: 1,
        client_id: Some(ByteString::from_static("test")),
        ..Default::default()
    };
    let frame = encode_request(&header, &body).expect("encodes").slice(4..);
    let Outcome::Respond(r) = dispatch::handle_as(&gw.broker, session(listener), frame).await
    else {
        panic!("{key:?}: no response");
    };
    decode_response(key, v, &r.to_bytes().slice(4..))
        .expect("decodes")
        .1
}

async fn call(gw: &Gateway, v: i16, body: RequestBody) -> ResponseBody {
    call_on(gw, "PLAINTEXT", v, body).await
}

async fn produce(gw: &Gateway, partition: i32) -> i16 {
    use produce_request::{PartitionProduceData, ProduceRequest, TopicProduceData};
    let body = ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(batch()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::Produce(r) = call(gw, 9, body.into()).await else {
        panic!("not produce");
    };
    r.responses[0].partition_responses[0].error_code
}

async fn high_watermark(gw: &Gateway, partition: i32) -> i64 {
    gw.store
        .watermarks("t", partition)
        .await
        .expect("watermarks")
        .high_watermark
}

fn view(ids: &[i32]) -> LiveView {
    LiveView {
        members: ids.iter().map(|&id| member(id)).collect(),
        version: 1,
    }
}

/// A partition of "t" led by `node` in the view of `ids`.
fn led_by(ids: &[i32], node: i32) -> i32 {
    (0..PARTITIONS)
        .find(|p| leader(&view(ids), "t", *p) == Some(node))
        .expect("some partition led by the node")
}

/// A group name coordinated by `node` in the view of `ids`.
fn group_of(ids: &[i32], node: i32) -> String {
    (0..1000)
        .map(|i| format!("group-{i}"))
        .find(|g| coordinator(&view(ids), g) == Some(node))
        .expect("some group coordinated by the node")
}

async fn metadata(gw: &Gateway, listener: &str) -> metadata_response::MetadataResponse {
    let req = metadata_request::MetadataRequest {
        topics: None,
        ..Default::default()
    };
    let ResponseBody::Metadata(m) = call_on(gw, listener, 12, req.into()).await else {
        panic!("not metadata");
    };
    m
}

#[tokio::test]
async fn metadata_lists_the_live_gateways_per_listener_and_spreads_leaders() {
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    for (listener, prefix, port) in [("PLAINTEXT", "plain", 9092), ("SSL", "ssl", 9093)] {
        let m = metadata(&gw, listener).await;
        let brokers: Vec<(i32, String, i32)> = m
            .brokers
            .iter()
            .map(|b| (b.node_id, b.host.to_string(), b.port))
            .collect();
        let expected: Vec<(i32, String, i32)> = ids
            .iter()
            .map(|&id| (id, format!("{prefix}-{id}"), port))
            .collect();
        assert_eq!(brokers, expected, "{listener}");
        assert_eq!(m.controller_id, 1);
        let t = &m.topics[0];
        assert_eq!(t.partitions.len(), PARTITIONS as usize);
        let mut used = std::collections::BTreeSet::new();
        for p in &t.partitions {
            let l = leader(&view(&ids), "t", p.partition_index).expect("a leader");
            assert_eq!(p.leader_id, l);
            assert_eq!(p.replica_nodes, vec![l]);
            assert_eq!(p.isr_nodes, vec![l]);
            used.insert(l);
        }
        assert_eq!(used.len(), 3, "leaders over every gateway");
    }
    let req = describe_cluster_request::DescribeClusterRequest::default();
    let ResponseBody::DescribeCluster(d) = call_on(&gw, "SSL", 0, req.into()).await else {
        panic!("not describe cluster");
    };
    let brokers: Vec<(i32, String)> = d
        .brokers
        .iter()
        .map(|b| (b.broker_id, b.host.to_string()))
        .collect();
    assert_eq!(
        brokers,
        vec![
            (1, "ssl-1".into()),
            (2, "ssl-2".into()),
            (3, "ssl-3".into())
        ]
    );
    assert_eq!(d.controller_id, 1);
    // The controller is the lowest live node id.
    gw.fake.set_members(members(&[2, 3]));
    assert_eq!(metadata(&gw, "PLAINTEXT").await.controller_id, 2);
}

#[tokio::test]
async fn a_partition_led_elsewhere_is_refused_and_nothing_is_written() {
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    let theirs = led_by(&ids, 2);
    let mine = led_by(&ids, 1);
    assert_eq!(
        produce(&gw, theirs).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(high_watermark(&gw, theirs).await, 0);
    assert_eq!(produce(&gw, mine).await, ErrorCode::NONE.code());
    assert_eq!(high_watermark(&gw, mine).await, 1);

    // Reads of it are refused too.
    for p in [theirs, mine] {
        let expected = if p == mine {
            ErrorCode::NONE
        } else {
            ErrorCode::NOT_LEADER_OR_FOLLOWER
        };
        let fetch = fetch_request::FetchRequest {
            max_wait_ms: 0,
            max_bytes: 1 << 20,
            topics: vec![fetch_request::FetchTopic {
                topic: ByteString::from_static("t"),
                partitions: vec![fetch_request::FetchPartition {
                    partition: p,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::Fetch(f) = call(&gw, 12, fetch.into()).await else {
            panic!("not fetch");
        };
        assert_eq!(f.responses[0].partitions[0].error_code, expected.code());
        let list = list_offsets_request::ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                name: ByteString::from_static("t"),
                partitions: vec![list_offsets_request::ListOffsetsPartition {
                    partition_index: p,
                    timestamp: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::ListOffsets(l) = call(&gw, 7, list.into()).await else {
            panic!("not list offsets");
        };
        assert_eq!(l.topics[0].partitions[0].error_code, expected.code());
        let delete = delete_records_request::DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                name: ByteString::from_static("t"),
                partitions: vec![delete_records_request::DeleteRecordsPartition {
                    partition_index: p,
                    offset: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::DeleteRecords(d) = call(&gw, 2, delete.into()).await else {
            panic!("not delete records");
        };
        assert_eq!(d.topics[0].partitions[0].error_code, expected.code());
        let epoch = offset_for_leader_epoch_request::OffsetForLeaderEpochRequest {
            topics: vec![offset_for_leader_epoch_request::OffsetForLeaderTopic {
                topic: ByteString::from_static("t"),
                partitions: vec![offset_for_leader_epoch_request::OffsetForLeaderPartition {
                    partition: p,
                    leader_epoch: 0,
                    current_leader_epoch: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::OffsetForLeaderEpoch(e) = call(&gw, 4, epoch.into()).await else {
            panic!("not offset for leader epoch");
        };
        assert_eq!(e.topics[0].partitions[0].error_code, expected.code());
    }
}

#[tokio::test]
async fn a_view_change_moves_leadership_on_the_next_request() {
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    // A partition of node 2 that falls to node 1 when node 2 leaves.
    let p = (0..PARTITIONS)
        .find(|p| {
            leader(&view(&ids), "t", *p) == Some(2) && leader(&view(&[1, 3]), "t", *p) == Some(1)
        })
        .expect("such a partition");
    assert_eq!(
        produce(&gw, p).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    gw.fake.set_members(members(&[1, 3]));
    assert_eq!(produce(&gw, p).await, ErrorCode::NONE.code());
    let m = metadata(&gw, "PLAINTEXT").await;
    assert_eq!(m.topics[0].partitions[p as usize].leader_id, 1);
    assert!(m.brokers.iter().all(|b| b.node_id != 2));
    // Node 2 back: it leads the partition again.
    gw.fake.set_members(members(&ids));
    assert_eq!(
        produce(&gw, p).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(high_watermark(&gw, p).await, 1);
}

async fn join(gw: &Gateway, group: &str) -> i16 {
    let req = join_group_request::JoinGroupRequest {
        group_id: ByteString::from(group.to_owned()),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: ByteString::from_static("consumer"),
        protocols: vec![join_group_request::JoinGroupRequestProtocol {
            name: ByteString::from_static("range"),
            metadata: Bytes::from_static(b"\x00\x00"),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::JoinGroup(r) = call(gw, 5, req.into()).await else {
        panic!("not join group");
    };
    r.error_code
}

async fn commit(gw: &Gateway, group: &str) -> i16 {
    let req = offset_commit_request::OffsetCommitRequest {
        group_id: ByteString::from(group.to_owned()),
        generation_id_or_member_epoch: -1,
        topics: vec![offset_commit_request::OffsetCommitRequestTopic {
            name: ByteString::from_static("t"),
            partitions: vec![offset_commit_request::OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::OffsetCommit(r) = call(gw, 8, req.into()).await else {
        panic!("not offset commit");
    };
    r.topics[0].partitions[0].error_code
}

#[tokio::test]
async fn groups_are_served_only_by_their_coordinator() {
    let ids = [1, 2];
    let gw = gateway(&ids).await;
    let theirs = group_of(&ids, 2);
    let mine = group_of(&ids, 1);
    // FindCoordinator answers the owner at its address for the request's listener.
    let req = find_coordinator_request::FindCoordinatorRequest {
        coordinator_keys: vec![
            ByteString::from(theirs.clone()),
            ByteString::from(mine.clone()),
        ],
        ..Default::default()
    };
    let ResponseBody::FindCoordinator(f) = call_on(&gw, "SSL", 4, req.into()).await else {
        panic!("not find coordinator");
    };
    let found: Vec<(i32, String, i32)> = f
        .coordinators
        .iter()
        .map(|c| (c.node_id, c.host.to_string(), c.port))
        .collect();
    assert_eq!(
        found,
        vec![(2, "ssl-2".into(), 9093), (1, "ssl-1".into(), 9093)]
    );
    let nc = ErrorCode::NOT_COORDINATOR.code();
    assert_eq!(join(&gw, &theirs).await, nc);
    assert_eq!(commit(&gw, &theirs).await, nc);
    assert_ne!(join(&gw, &mine).await, nc);
    assert_eq!(commit(&gw, &mine).await, ErrorCode::NONE.code());
    let fetch = offset_fetch_request::OffsetFetchRequest {
        group_id: ByteString::from(theirs.clone()),
        topics: None,
        ..Default::default()
    };
    let ResponseBody::OffsetFetch(o) = call(&gw, 7, fetch.into()).await else {
        panic!("not offset fetch");
    };
    assert_eq!(o.error_code, nc);
    let describe = describe_groups_request::DescribeGroupsRequest {
        groups: vec![
            ByteString::from(theirs.clone()),
            ByteString::from(mine.clone()),
        ],
        ..Default::default()
    };
    let ResponseBody::DescribeGroups(d) = call(&gw, 5, describe.into()).await else {
        panic!("not describe groups");
    };
    let codes: Vec<(String, i16)> = d
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.error_code))
        .collect();
    assert!(codes.contains(&(theirs.clone(), nc)), "{codes:?}");
    assert!(codes.contains(&(mine.clone(), 0)), "{codes:?}");
    let delete = delete_groups_request::DeleteGroupsRequest {
        groups_names: vec![ByteString::from(theirs.clone())],
        ..Default::default()
    };
    let ResponseBody::DeleteGroups(d) = call(&gw, 2, delete.into()).await else {
        panic!("not delete groups");
    };
    assert_eq!(d.results[0].error_code, nc);
}

#[tokio::test]
async fn without_its_lease_a_gateway_owns_nothing() {
    let ids = [1, 2];
    let gw = gateway(&ids).await;
    let mine = led_by(&ids, 1);
    let group = group_of(&ids, 1);
    gw.fake.set_lease(false);
    assert_eq!(
        produce(&gw, mine).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(high_watermark(&gw, mine).await, 0);
    let unavailable = ErrorCode::COORDINATOR_NOT_AVAILABLE.code();
    assert_eq!(join(&gw, &group).await, unavailable);
    assert_eq!(commit(&gw, &group).await, unavailable);
    // Lease back: served again.
    gw.fake.set_lease(true);
    assert_eq!(produce(&gw, mine).await, ErrorCode::NONE.code());
    // Out of the view (lease held but not listed): the same as without a lease.
    gw.fake.set_members(members(&[2]));
    assert_eq!(
        produce(&gw, mine).await,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert_eq!(join(&gw, &group).await, unavailable);
    // An empty view: no leaders, no coordinator, no controller.
    gw.fake.set_members(members(&[]));
    let m = metadata(&gw, "PLAINTEXT").await;
    assert!(m.brokers.is_empty());
    assert_eq!(m.controller_id, -1);
    assert!(
        m.topics[0]
            .partitions
            .iter()
            .all(|p| p.leader_id == -1 && p.error_code == ErrorCode::LEADER_NOT_AVAILABLE.code())
    );
    let req = find_coordinator_request::FindCoordinatorRequest {
        key: ByteString::from(group.clone()),
        ..Default::default()
    };
    let ResponseBody::FindCoordinator(f) = call(&gw, 3, req.into()).await else {
        panic!("not find coordinator");
    };
    assert_eq!(f.error_code, unavailable);
    assert_eq!(f.node_id, -1);
}

#[tokio::test]
async fn hammering_a_partition_led_elsewhere_writes_nothing() {
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    let theirs = led_by(&ids, 3);
    for _ in 0..2_000 {
        assert_eq!(
            produce(&gw, theirs).await,
            ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
        );
    }
    assert_eq!(high_watermark(&gw, theirs).await, 0);
    // Nothing reached the log, on any partition.
    let total: i64 = {
        let mut sum = 0;
        for p in 0..PARTITIONS {
            sum += high_watermark(&gw, p).await;
        }
        sum
    };
    assert_eq!(total, 0);
}

/// A long-poll Fetch of a partition led elsewhere is answered at once, not after
/// `max_wait_ms` (virtual time: the clock only moves if the handler waits).
#[tokio::test(start_paused = true)]
async fn a_long_poll_of_a_partition_led_elsewhere_does_not_wait() {
    let ids = [1, 2];
    let gw = gateway(&ids).await;
    let theirs = led_by(&ids, 2);
    let fetch = fetch_request::FetchRequest {
        max_wait_ms: 30_000,
        min_bytes: 1,
        max_bytes: 1 << 20,
        topics: vec![fetch_request::FetchTopic {
            topic: ByteString::from_static("t"),
            partitions: vec![fetch_request::FetchPartition {
                partition: theirs,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let start = tokio::time::Instant::now();
    let ResponseBody::Fetch(f) = call(&gw, 12, fetch.into()).await else {
        panic!("not fetch");
    };
    assert_eq!(
        f.responses[0].partitions[0].error_code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// A Fetch of a partition led elsewhere names the leader from v12 (leader epoch 0, as
/// Metadata says) and, from v16, the leader's address for the request's listener; before
/// v12 there is no hint, and a partition this gateway leads gets none.
#[tokio::test]
async fn a_fetch_led_elsewhere_names_the_leader_and_its_address() {
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    let (two, three, mine) = (led_by(&ids, 2), led_by(&ids, 3), led_by(&ids, 1));
    // From v13 the topic is named by its id.
    let id = gw
        .store
        .topic("t")
        .await
        .expect("lookup")
        .expect("topic")
        .id;
    let fetch = |partitions: &[i32]| fetch_request::FetchRequest {
        max_wait_ms: 0,
        max_bytes: 1 << 20,
        topics: vec![fetch_request::FetchTopic {
            topic: ByteString::from_static("t"),
            topic_id: kafka_protocol::Uuid::from_u128(id),
            partitions: partitions
                .iter()
                .map(|&partition| fetch_request::FetchPartition {
                    partition,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let hints = |f: &fetch_response::FetchResponse| -> Vec<(i32, i16, i32, i32)> {
        f.responses[0]
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    p.error_code,
                    p.current_leader.leader_id,
                    p.current_leader.leader_epoch,
                )
            })
            .collect()
    };
    let not_leader = ErrorCode::NOT_LEADER_OR_FOLLOWER.code();
    let body = fetch(&[two, mine, three]);
    // v16 on the SSL listener: hints and the leaders' SSL addresses.
    let ResponseBody::Fetch(f) = call_on(&gw, "SSL", 16, body.clone().into()).await else {
        panic!("not fetch");
    };
    assert_eq!(
        hints(&f),
        vec![
            (two, not_leader, 2, 0),
            (mine, 0, -1, -1),
            (three, not_leader, 3, 0)
        ]
    );
    let endpoints: Vec<(i32, String, i32)> = f
        .node_endpoints
        .iter()
        .map(|e| (e.node_id, e.host.to_string(), e.port))
        .collect();
    assert_eq!(
        endpoints,
        vec![(2, "ssl-2".into(), 9093), (3, "ssl-3".into(), 9093)]
    );
    // v12: the hint, no endpoints (the field does not exist before v16).
    let ResponseBody::Fetch(f) = call(&gw, 12, body.clone().into()).await else {
        panic!("not fetch");
    };
    assert_eq!(hints(&f)[0], (two, not_leader, 2, 0));
    assert!(f.node_endpoints.is_empty());
    // v11: the error alone.
    let ResponseBody::Fetch(f) = call(&gw, 11, body.into()).await else {
        panic!("not fetch");
    };
    assert_eq!(hints(&f)[0], (two, not_leader, -1, -1));
    // Only a partition this gateway leads: no endpoints.
    let ResponseBody::Fetch(f) = call(&gw, 16, fetch(&[mine]).into()).await else {
        panic!("not fetch");
    };
    assert!(f.node_endpoints.is_empty());
    // Without its lease the gateway still names the leaders it does not own.
    gw.fake.set_lease(false);
    let ResponseBody::Fetch(f) = call(&gw, 16, fetch(&[two, mine]).into()).await else {
        panic!("not fetch");
    };
    assert_eq!(
        hints(&f),
        vec![(two, not_leader, 2, 0), (mine, not_leader, -1, -1)]
    );
}

/// A Produce for partitions led elsewhere names their leaders from v10 (epoch 0) with
/// their addresses for the request's listener; before v10 the error comes alone.
#[tokio::test]
async fn a_produce_led_elsewhere_names_the_leader_and_its_address() {
    use produce_request::{PartitionProduceData, ProduceRequest, TopicProduceData};
    let ids = [1, 2, 3];
    let gw = gateway(&ids).await;
    let (two, three) = (led_by(&ids, 2), led_by(&ids, 3));
    let body = ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: [two, three]
                .iter()
                .map(|&index| PartitionProduceData {
                    index,
                    records: Some(batch()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let not_leader = ErrorCode::NOT_LEADER_OR_FOLLOWER.code();
    let hints = |r: &produce_response::ProduceResponse| -> Vec<(i32, i16, i32, i32)> {
        r.responses[0]
            .partition_responses
            .iter()
            .map(|p| {
                (
                    p.index,
                    p.error_code,
                    p.current_leader.leader_id,
                    p.current_leader.leader_epoch,
                )
            })
            .collect()
    };
    let ResponseBody::Produce(r) = call_on(&gw, "SSL", 10, body.clone().into()).await else {
        panic!("not produce");
    };
    assert_eq!(
        hints(&r),
        vec![(two, not_leader, 2, 0), (three, not_leader, 3, 0)]
    );
    let endpoints: Vec<(i32, String, i32)> = r
        .node_endpoints
        .iter()
        .map(|e| (e.node_id, e.host.to_string(), e.port))
        .collect();
    assert_eq!(
        endpoints,
        vec![(2, "ssl-2".into(), 9093), (3, "ssl-3".into(), 9093)]
    );
    let ResponseBody::Produce(r) = call(&gw, 9, body.into()).await else {
        panic!("not produce");
    };
    assert_eq!(
        hints(&r),
        vec![(two, not_leader, -1, -1), (three, not_leader, -1, -1)]
    );
    assert!(r.node_endpoints.is_empty());
}
