//! Three gateways on one Iggy with `IGGY_KAFKA_BROKERS`: every gateway lists the three,
//! they agree on every partition's leader and on the coordinator of a group, each
//! refuses a Produce for a partition another leads, and a gateway killed leaves the view
//! of the others within the session timeout.
//!
//! A confluent-kafka group then splits, leaves and resumes across the three (every
//! client suite against three gateways is in `trio_clients.rs`).
//!
//! Needs `IGGY_SERVER_BIN` (and confluent-kafka from `scripts/install-clients.sh` for the
//! suite); prints `SKIPPED:` without them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::{ByteString, ResponseBody};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::trio::{
    DEFAULT_LEASE, SESSION_TIMEOUT_MS, Trio, broker_ids, call, cluster_env, metadata, until,
};
use support::{Client, Gateway, IggyServer, iggy_server_bin, require, run_against_all};

const PARTITIONS: i32 = 12;

fn leaders(m: &MetadataResponse) -> Vec<i32> {
    m.topics[0].partitions.iter().map(|p| p.leader_id).collect()
}

fn produce(addr: SocketAddr, topic: &str, partition: i32) -> i16 {
    let records = vec![kafka_records::NewRecord {
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: vec![],
    }];
    let mut batch = BytesMut::new();
    kafka_records::encode_batch(
        &kafka_records::BatchOptions::default(),
        &records,
        &mut batch,
    )
    .unwrap();
    let req = ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from(topic.to_owned()),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(batch.freeze()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match call(addr, 9, req.into()) {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("not produce: {other:?}"),
    }
}

/// One gateway of a broker list on `iggy`, node `node_id` listening on `port` and
/// advertising `advertised` (the port its list entry names).
fn gateway(iggy: &IggyServer, node_id: i32, port: u16, advertised: u16, brokers: &str) -> Gateway {
    let bind = format!("127.0.0.1:{port}");
    let advertised = advertised.to_string();
    let env = cluster_env(iggy, node_id, brokers);
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("IGGY_KAFKA_BIND_ADDR", bind.as_str()));
    all.push(("IGGY_KAFKA_ADVERTISED_PORT", advertised.as_str()));
    Gateway::start(&all)
}

#[test]
fn three_gateways_agree_and_a_killed_one_leaves_the_view() {
    let Some(bin) = iggy_server_bin("three gateways") else {
        return;
    };
    let mut trio = Trio::start(IggyServer::start(&bin), &[]);
    let addrs: Vec<SocketAddr> = trio.gateways.iter().map(|g| g.addr).collect();

    let topic = format!("cluster-{}", test_support::unique());
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: ByteString::from(topic.clone()),
            num_partitions: PARTITIONS,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(c) = call(addrs[1], 5, create.into()) else {
        panic!("not create topics");
    };
    assert_eq!(c.topics[0].error_code, 0, "{c:?}");

    // Every gateway sees the three, and they agree on the leaders.
    until(
        Duration::from_secs(15),
        "three live gateways everywhere",
        || {
            addrs
                .iter()
                .all(|a| broker_ids(&metadata(*a, &topic)) == vec![1, 2, 3])
        },
    );
    let first = metadata(addrs[0], &topic);
    let ports_seen: Vec<i32> = first.brokers.iter().map(|b| b.port).collect();
    let expected: Vec<i32> = addrs.iter().map(|a| i32::from(a.port())).collect();
    assert_eq!(ports_seen, expected);
    let placed = leaders(&first);
    for a in &addrs[1..] {
        assert_eq!(leaders(&metadata(*a, &topic)), placed);
    }
    let mut used = placed.clone();
    used.sort_unstable();
    used.dedup();
    assert!(used.len() >= 2, "leaders over one gateway only: {placed:?}");

    // Each partition is written only through its leader.
    for (p, leader) in placed.iter().enumerate() {
        let p = i32::try_from(p).unwrap();
        for (i, a) in addrs.iter().enumerate() {
            let node = i32::try_from(i).unwrap() + 1;
            if node == *leader {
                // Named at once, a joiner owns its partitions after its join wait.
                until(Duration::from_secs(10), "the leader taking writes", || {
                    produce(*a, &topic, p) == 0
                });
            } else {
                let code = produce(*a, &topic, p);
                assert_eq!(code, 6, "partition {p} on {node}, led by {leader}");
            }
        }
    }

    // The coordinator of a group is the same from every gateway.
    let coordinators: Vec<i32> = addrs
        .iter()
        .map(|a| {
            let req = FindCoordinatorRequest {
                key: ByteString::from_static("cluster-group"),
                ..Default::default()
            };
            match call(*a, 3, req.into()) {
                ResponseBody::FindCoordinator(f) => {
                    assert_eq!(f.error_code, 0);
                    f.node_id
                }
                other => panic!("not find coordinator: {other:?}"),
            }
        })
        .collect();
    assert!(
        coordinators.iter().all(|c| *c == coordinators[0]),
        "{coordinators:?}"
    );

    // Gateway 3 killed: the others drop it within the session timeout (plus polling),
    // and its partitions get leaders among the living.
    let killed_at = Instant::now();
    drop(trio.gateways.pop());
    let took = until(
        Duration::from_millis(SESSION_TIMEOUT_MS * 3),
        "gateway 3 leaving the view",
        || {
            addrs[..2]
                .iter()
                .all(|a| broker_ids(&metadata(*a, &topic)) == vec![1, 2])
        },
    );
    let after = leaders(&metadata(addrs[0], &topic));
    assert!(after.iter().all(|l| *l == 1 || *l == 2), "{after:?}");
    for (before, now) in placed.iter().zip(&after) {
        if *before != 3 {
            assert_eq!(before, now, "only gateway 3's partitions move");
        }
    }
    eprintln!(
        "MEASURED: gateway 3 left the view of the others {} ms after SIGKILL (polled every 100 ms; session timeout {SESSION_TIMEOUT_MS} ms); kill-to-view {:?}",
        took.as_millis(),
        killed_at.elapsed()
    );
    drop(trio);
}

/// Runs `script` with confluent-kafka against three fresh gateways, bootstrapped with
/// all three.
fn confluent_against_trio(name: &str, script: &str) {
    let client = Client::Python {
        module: "confluent_kafka",
    };
    if !require(name, client) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let mut trio = Trio::start(IggyServer::start(&bin), DEFAULT_LEASE);
    trio.wait_live();
    run_against_all(
        &trio.refs(),
        name,
        client,
        script,
        &[],
        &support::topic_prefix(name),
        Duration::from_secs(180),
    );
}

#[test]
fn a_group_splits_leaves_and_resumes_across_three_gateways() {
    confluent_against_trio(
        "confluent-kafka group split on three gateways",
        "tests/clients/groups/confluent_split_leave.py",
    );
}

#[test]
fn a_fenced_gateway_stops_with_exit_code_1() {
    let Some(bin) = iggy_server_bin("fenced gateway") else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let ports: Vec<u16> = (0..2).map(|_| test_support::free_port()).collect();
    let brokers = format!("1@127.0.0.1:{},2@127.0.0.1:{}", ports[0], ports[1]);
    let mut first = gateway(&iggy, 1, ports[0], ports[0], &brokers);
    // A second start of node id 1 (a restart while the old process still runs, bound to
    // another port but advertising the listed one): its epoch is higher, so the first is
    // fenced and must stop acting and exit.
    let other = test_support::free_port();
    let second = gateway(&iggy, 1, other, ports[0], &brokers);
    let took = until(
        Duration::from_millis(SESSION_TIMEOUT_MS * 2),
        "the fenced gateway exiting",
        || !first.is_running(),
    );
    let status = first.exit_status().expect("exited");
    assert_eq!(status.code(), Some(1), "{}", first.output(40));
    let out = first.output(40);
    assert!(
        out.contains("a newer start of this node id joined"),
        "the reason is logged: {out}"
    );
    eprintln!("fenced gateway exited {took:?} after the second start was listening");
    // The newer start keeps serving.
    let m = metadata(second.addr, "fenced-check");
    assert!(broker_ids(&m).contains(&1), "{m:?}");
}

/// The partition count each gateway's Metadata gives `topic` (`None`: not listed).
fn partition_count(addr: SocketAddr, topic: &str) -> Option<usize> {
    let m = metadata(addr, topic);
    (m.topics[0].error_code == 0).then(|| m.topics[0].partitions.len())
}

/// Topic administration through whichever gateway: a topic created through one is
/// listed by all, partitions added through another are seen by all, the first refuses to
/// create it again, a retention set through one is described by all, and deleted through
/// the third it is gone everywhere. DescribeCluster
/// names the same controller and the three gateways on each.
#[test]
fn topic_admin_works_through_any_gateway() {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsRequest, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
    use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
    use kafka_protocol::messages::describe_configs_request::{
        DescribeConfigsRequest, DescribeConfigsResource,
    };
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
    };
    let Some(bin) = iggy_server_bin("topic admin on three gateways") else {
        return;
    };
    let mut trio = Trio::start(IggyServer::start(&bin), DEFAULT_LEASE);
    trio.wait_live();
    let addrs: Vec<SocketAddr> = trio.gateways.iter().map(|g| g.addr).collect();
    let topic = format!("admin-{}", test_support::unique());
    // Every gateway's view of topics comes from Iggy within the bridge's metadata age
    // (1 s by default): poll for up to 10 s.
    let everywhere = |what: &str, want: Option<usize>| {
        until(Duration::from_secs(10), what, || {
            addrs.iter().all(|a| partition_count(*a, &topic) == want)
        });
    };
    let create = |addr: SocketAddr| {
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: ByteString::from(topic.clone()),
                num_partitions: 3,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 10_000,
            ..Default::default()
        };
        match call(addr, 5, req.into()) {
            ResponseBody::CreateTopics(c) => c.topics[0].error_code,
            other => panic!("not create topics: {other:?}"),
        }
    };
    assert_eq!(create(addrs[1]), 0);
    everywhere("the new topic listed with 3 partitions", Some(3));

    let grow = CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: ByteString::from(topic.clone()),
            count: 6,
            assignments: None,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreatePartitions(r) = call(addrs[2], 2, grow.into()) else {
        panic!("not create partitions");
    };
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    everywhere("6 partitions listed", Some(6));
    // TOPIC_ALREADY_EXISTS from the gateway that did not create it.
    assert_eq!(create(addrs[0]), 36);

    // A setting changed through one gateway is described by the others (each re-reads
    // the meta stream's topic settings).
    let alter = IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 2,
            resource_name: ByteString::from(topic.clone()),
            configs: vec![AlterableConfig {
                name: ByteString::from_static("retention.ms"),
                config_operation: 0,
                value: Some(ByteString::from_static("4321000")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::IncrementalAlterConfigs(r) = call(addrs[1], 1, alter.into()) else {
        panic!("not incremental alter configs");
    };
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    let retention = |addr: SocketAddr| {
        let req = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: 2,
                resource_name: ByteString::from(topic.clone()),
                configuration_keys: Some(vec![ByteString::from_static("retention.ms")]),
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::DescribeConfigs(d) = call(addr, 4, req.into()) else {
            panic!("not describe configs");
        };
        assert_eq!(d.results[0].error_code, 0, "{d:?}");
        d.results[0].configs[0]
            .value
            .as_ref()
            .map(ToString::to_string)
    };
    until(
        Duration::from_secs(10),
        "the new retention everywhere",
        || {
            addrs
                .iter()
                .all(|a| retention(*a).as_deref() == Some("4321000"))
        },
    );

    let delete = DeleteTopicsRequest {
        topic_names: vec![ByteString::from(topic.clone())],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::DeleteTopics(d) = call(addrs[0], 4, delete.into()) else {
        panic!("not delete topics");
    };
    assert_eq!(d.responses[0].error_code, 0, "{d:?}");
    everywhere("the deleted topic gone", None);

    for a in &addrs {
        let ResponseBody::DescribeCluster(c) =
            call(*a, 0, DescribeClusterRequest::default().into())
        else {
            panic!("not describe cluster");
        };
        assert_eq!(c.error_code, 0);
        assert_eq!(c.controller_id, 1, "the lowest live node id");
        let ids: Vec<i32> = c.brokers.iter().map(|b| b.broker_id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
    }
}
