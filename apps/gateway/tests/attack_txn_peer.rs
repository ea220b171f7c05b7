//! Hostile use of the gateway-to-gateway transaction APIs against the gateway binary:
//! WriteTxnMarkers and the batched AddPartitionsToTxn (v4+) from a client principal
//! without CLUSTER_ACTION (with the default settings, and with allow-everyone-if-no-ACL-found
//! on, which never opens CLUSTER_ACTION), and a flood of markers with made-up producers and spoofed
//! coordinator epochs from a principal that may send them.
//!
//! Each test states and checks: the refusals carry `CLUSTER_AUTHORIZATION_FAILED` (31) on
//! every entry and write nothing, the gateway is still running afterwards, its peak
//! resident memory stayed under [`PEAK_RSS_BOUND_KIB`], and a well-behaved client asking
//! ApiVersions was answered within [`PROBE_BOUND`] throughout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest,
};
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use std::time::Duration;
use support::Gateway;
use support::attack::{Prober, peak_rss_bound_kib, peak_rss_kib};
use support::security::{ADMIN_USER, PLAIN_USER, SecureSetup};
use test_support::sasl_client::{Flow, SaslClient};
use tokio::net::TcpStream;

/// Peak RSS the gateway may reach during these attacks (debug build, embedded store).
const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;
/// Slowest answer the well-behaved client may get during an attack.
const PROBE_BOUND: Duration = Duration::from_secs(2);

const TOPIC: &str = "txn-peer-attack";
const CLUSTER_AUTHORIZATION_FAILED: i16 = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();

fn bs(s: &str) -> ByteString {
    ByteString::from(s.to_string())
}

async fn login(gw: &Gateway, user: &str, password: &str) -> SaslClient<TcpStream> {
    let socket = TcpStream::connect(gw.addr).await.unwrap();
    let mut c = SaslClient::new(socket).with_timeout(Duration::from_secs(30));
    let outcome = c
        .plain(Flow::Authenticate(2), user, password)
        .await
        .unwrap();
    assert!(outcome.is_authenticated(), "{user}: {outcome:?}");
    c
}

/// Markers for `partitions` of [`TOPIC`] from producer `pid`, claiming coordinator epoch
/// `coordinator_epoch`.
fn markers(pid: i64, coordinator_epoch: i32, partitions: Vec<i32>) -> RequestBody {
    WriteTxnMarkersRequest {
        markers: vec![WritableTxnMarker {
            producer_id: pid,
            producer_epoch: 0,
            transaction_result: true,
            coordinator_epoch,
            topics: vec![WritableTxnMarkerTopic {
                name: bs(TOPIC),
                partition_indexes: partitions,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn marker_codes(body: Option<ResponseBody>) -> Vec<i16> {
    match body {
        Some(ResponseBody::WriteTxnMarkers(r)) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .collect(),
        other => panic!("not WriteTxnMarkers: {other:?}"),
    }
}

/// The end offset of partition 0 of [`TOPIC`].
async fn end_offset(c: &mut SaslClient<TcpStream>) -> i64 {
    let body = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: bs(TOPIC),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp: -1,
                current_leader_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.request(5, body.into()).await.unwrap() {
        Some(ResponseBody::ListOffsets(r)) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.offset
        }
        other => panic!("not ListOffsets: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_actions_from_clients_are_refused_and_spoofed_markers_write_nothing() {
    cluster_actions(None).await;
}

/// The same with allow-everyone-if-no-ACL-found on: it opens topics and groups no binding
/// names, never CLUSTER_ACTION (a client would abort or fence other producers'
/// transactions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_everyone_does_not_open_cluster_actions_to_clients() {
    cluster_actions(Some("true")).await;
}

/// With the default `allow_everyone_if_no_acl_found` (`None`) or the one given.
async fn cluster_actions(allow_everyone: Option<&str>) {
    let setup = SecureSetup::new();
    let users_file = setup.users_file.display().to_string();
    let super_users = format!("User:{ADMIN_USER}");
    let mut env = vec![
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
        ("IGGY_KAFKA_SASL_USERS_FILE", users_file.as_str()),
        ("IGGY_KAFKA_SUPER_USERS", super_users.as_str()),
        ("IGGY_KAFKA_AUTHORIZATION_ENABLED", "true"),
    ];
    if let Some(v) = allow_everyone {
        env.push(("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", v));
    }
    let gw = Gateway::start(&env);
    let mut admin = login(&gw, ADMIN_USER, &setup.admin_password).await;
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: bs(TOPIC),
            num_partitions: 3,
            replication_factor: -1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    match admin.request(5, create.into()).await.unwrap() {
        Some(ResponseBody::CreateTopics(r)) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    let prober = Prober::start(gw.addr, Duration::from_millis(50));

    // A client principal: every marker refused, and the batched AddPartitionsToTxn too.
    let mut alice = login(&gw, PLAIN_USER, &setup.plain_password).await;
    let codes = marker_codes(
        alice
            .request(1, markers(42, i32::MAX, vec![0, 1, 2]))
            .await
            .unwrap(),
    );
    assert_eq!(codes, [CLUSTER_AUTHORIZATION_FAILED; 3]);
    let verify = AddPartitionsToTxnRequest {
        transactions: vec![AddPartitionsToTxnTransaction {
            transactional_id: bs("someone-elses"),
            producer_id: 42,
            producer_epoch: 0,
            verify_only: true,
            topics: vec![AddPartitionsToTxnTopic {
                name: bs(TOPIC),
                partitions: vec![0],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match alice.request(4, verify.into()).await.unwrap() {
        Some(ResponseBody::AddPartitionsToTxn(r)) => {
            assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
            assert!(r.results_by_transaction.is_empty());
        }
        other => panic!("{other:?}"),
    }

    // A principal that may send markers, with made-up producers and spoofed coordinator
    // epochs (highest first, then lower): no transaction is open, so nothing is written.
    let before = end_offset(&mut admin).await;
    for round in 0..200i32 {
        let epoch = if round % 2 == 0 { i32::MAX } else { round };
        let partitions = (0..1000).collect();
        let codes = marker_codes(
            admin
                .request(1, markers(1_000 + i64::from(round), epoch, partitions))
                .await
                .unwrap(),
        );
        assert_eq!(codes.len(), 1000);
        assert!(
            codes[..3]
                .iter()
                .all(|c| *c == 0 || *c == ErrorCode::TRANSACTION_COORDINATOR_FENCED.code()),
            "{:?}",
            &codes[..3]
        );
        assert!(
            codes[3..]
                .iter()
                .all(|c| *c == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()),
            "made-up partitions"
        );
    }
    assert_eq!(
        end_offset(&mut admin).await,
        before,
        "a spoofed marker was written"
    );

    let report = prober.finish();
    let mut gw = gw;
    assert!(gw.is_running(), "gateway died: {}", gw.output(40));
    report.assert_answered_within(PROBE_BOUND, &gw);
    if let Some(peak) = peak_rss_kib(gw.pid()) {
        let bound = peak_rss_bound_kib(&gw, PEAK_RSS_BOUND_KIB);
        assert!(peak < bound, "peak RSS {peak} KiB over {bound} KiB");
    }
}
