//! Transactions across gateways, through the public [`kafka_broker::Server`] over TCP:
//! servers on one [`MemoryStore`], each with a [`ManualMembership`] the test sets. The
//! coordinator of a transactional id and the leader of its partition are different
//! gateways: the leader verifies the transactional produce with the coordinator, and the
//! coordinator's commit and abort markers reach the leader over the inter-gateway client.
//! When both move while a commit is prepared (the leader stopped, so its markers cannot be
//! written), the new owner loads the prepared transaction, rebuilds the partition's index
//! from the log and finishes the commit: the last stable offset moves past it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use kafka_broker::cluster::{coordinator, leader};
use kafka_broker::session::Listener;
use kafka_broker::store::cluster::{LiveView, ManualMembership, Member, MemberListener};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Server, Stores, TransactionSettings};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, ErrorCode, RequestBody, ResponseBody};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const TOPIC: &str = "t";
const PARTITIONS: i32 = 8;

fn bs(s: &str) -> ByteString {
    ByteString::from(s.to_string())
}

async fn call(addr: SocketAddr, key: ApiKey, v: i16, body: RequestBody) -> ResponseBody {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: v,
        correlation_id: 7,
        client_id: Some(bs("txn-handover")),
        ..Default::default()
    };
    socket
        .write_all(&encode_request(&header, &body).unwrap())
        .await
        .unwrap();
    let len = usize::try_from(socket.read_u32().await.unwrap()).unwrap();
    let mut raw = vec![0u8; len];
    socket.read_exact(&mut raw).await.unwrap();
    decode_response(key, v, &raw.into()).unwrap().1
}

fn member(node_id: i32, epoch: u64, port: u16) -> Member {
    Member {
        node_id,
        epoch,
        listeners: vec![MemberListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
        }],
    }
}

fn view(members: &[Member]) -> LiveView {
    let mut members = members.to_vec();
    members.sort_by_key(|m| m.node_id);
    LiveView {
        members,
        version: 1,
    }
}

async fn store() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: TOPIC.into(),
                partitions: PARTITIONS,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    store
}

struct Gateway {
    addr: SocketAddr,
    membership: Arc<ManualMembership>,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Gateway {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.done).await;
    }
}

fn start(tcp: TcpListener, me: Member, members: Vec<Member>, store: Arc<MemoryStore>) -> Gateway {
    let addr = tcp.local_addr().unwrap();
    let mut transactions = TransactionSettings::default();
    transactions.marker_retry_min = Duration::from_millis(20);
    transactions.marker_retry_max = Duration::from_millis(100);
    let mut config = BrokerConfig {
        node_id: me.node_id,
        advertised_port: addr.port(),
        ..BrokerConfig::default()
    };
    config.transactions = transactions;
    config.inter_gateway.request_timeout = Duration::from_secs(2);
    let membership = Arc::new(ManualMembership::new(me, members));
    let server = Server::new(
        config,
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
    .listener(Listener::plaintext().advertising("127.0.0.1", addr.port()))
    .membership(membership.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        let _ = server
            .serve(tcp, async {
                let _ = stopped.await;
            })
            .await;
    });
    Gateway {
        addr,
        membership,
        stop: Some(stop),
        done,
    }
}

/// A transactional id coordinated by `coord` in `v`.
fn id_coordinated_by(v: &LiveView, coord: i32) -> String {
    (0..10_000)
        .map(|i| format!("txn-{i}"))
        .find(|id| coordinator(v, id) == Some(coord))
        .expect("some id lands on every member")
}

/// A partition of [`TOPIC`] led by `node` in `v`.
fn partition_led_by(v: &LiveView, node: i32) -> i32 {
    (0..PARTITIONS)
        .find(|p| leader(v, TOPIC, *p) == Some(node))
        .expect("some partition lands on every member")
}

/// Retries `f` while it answers a retriable coordinator code.
async fn settled<F, Fut>(mut f: F) -> i16
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = i16>,
{
    let retriable = [
        ErrorCode::CONCURRENT_TRANSACTIONS.code(),
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code(),
        ErrorCode::NOT_COORDINATOR.code(),
        ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
        ErrorCode::NOT_ENOUGH_REPLICAS.code(),
        ErrorCode::NOT_LEADER_OR_FOLLOWER.code(),
    ];
    let mut last = 0;
    for _ in 0..300 {
        last = f().await;
        if !retriable.contains(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still retriable after many tries: {last}");
}

async fn init(addr: SocketAddr, id: &str) -> (i64, i16) {
    for _ in 0..300 {
        let body = InitProducerIdRequest {
            transactional_id: Some(bs(id)),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        let ResponseBody::InitProducerId(r) =
            call(addr, ApiKey::InitProducerId, 4, body.into()).await
        else {
            panic!("not InitProducerId")
        };
        if r.error_code == 0 {
            return (r.producer_id, r.producer_epoch);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("InitProducerId of {id} never succeeded");
}

async fn add(addr: SocketAddr, id: &str, (pid, epoch): (i64, i16), partition: i32) {
    let code = settled(|| async {
        let body = AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: bs(id),
            v3_and_below_producer_id: pid,
            v3_and_below_producer_epoch: epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: bs(TOPIC),
                partitions: vec![partition],
                ..Default::default()
            }],
            ..Default::default()
        };
        match call(addr, ApiKey::AddPartitionsToTxn, 3, body.into()).await {
            ResponseBody::AddPartitionsToTxn(r) => {
                r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
    assert_eq!(code, 0, "AddPartitionsToTxn");
}

fn batch((pid, epoch): (i64, i16), sequence: i32, values: &[&str]) -> Bytes {
    let records: Vec<kafka_records::NewRecord> = values
        .iter()
        .map(|v| kafka_records::NewRecord {
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![],
        })
        .collect();
    let options = kafka_records::BatchOptions {
        transactional: true,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: sequence,
        ..Default::default()
    };
    let mut out = BytesMut::new();
    kafka_records::encode_batch(&options, &records, &mut out).unwrap();
    out.freeze()
}

/// A transactional Produce v9 of `records` to `partition` at `addr`: its code.
async fn produce(addr: SocketAddr, id: &str, partition: i32, records: Bytes) -> i16 {
    let body = ProduceRequest {
        transactional_id: Some(bs(id)),
        acks: -1,
        timeout_ms: 5000,
        topic_data: vec![TopicProduceData {
            name: bs(TOPIC),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(records),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match call(addr, ApiKey::Produce, 9, body.into()).await {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

async fn end(addr: SocketAddr, id: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    settled(|| async {
        let body = EndTxnRequest {
            transactional_id: bs(id),
            producer_id: pid,
            producer_epoch: epoch,
            committed: commit,
            ..Default::default()
        };
        match call(addr, ApiKey::EndTxn, 3, body.into()).await {
            ResponseBody::EndTxn(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    })
    .await
}

async fn state(addr: SocketAddr, id: &str) -> (i16, String) {
    let body = DescribeTransactionsRequest {
        transactional_ids: vec![bs(id)],
        ..Default::default()
    };
    match call(addr, ApiKey::DescribeTransactions, 0, body.into()).await {
        ResponseBody::DescribeTransactions(r) => {
            let s = &r.transaction_states[0];
            (s.error_code, s.transaction_state.to_string())
        }
        other => panic!("{other:?}"),
    }
}

async fn wait_state(addr: SocketAddr, id: &str, wanted: &str) {
    let mut last = (0, String::new());
    for _ in 0..300 {
        last = state(addr, id).await;
        if last == (0, wanted.to_owned()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id} never reached {wanted}: {last:?}");
}

/// A read_committed Fetch v11 of `partition` from offset 0.
async fn fetch_committed(addr: SocketAddr, partition: i32) -> PartitionData {
    let body = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        isolation_level: 1,
        topics: vec![FetchTopic {
            topic: bs(TOPIC),
            partitions: vec![FetchPartition {
                partition,
                fetch_offset: 0,
                partition_max_bytes: 1 << 20,
                current_leader_epoch: -1,
                log_start_offset: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match call(addr, ApiKey::Fetch, 11, body.into()).await {
        ResponseBody::Fetch(mut r) => r.responses.remove(0).partitions.remove(0),
        other => panic!("{other:?}"),
    }
}

/// Waits until the partition's last stable offset reaches its high watermark.
async fn wait_stable(addr: SocketAddr, partition: i32) -> PartitionData {
    let mut last = None;
    for _ in 0..300 {
        let p = fetch_committed(addr, partition).await;
        if p.error_code == 0 && p.high_watermark > 0 && p.last_stable_offset == p.high_watermark {
            return p;
        }
        last = Some(p);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("partition {partition} never stable: {last:?}");
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_reach_the_partition_leader_on_another_gateway() {
    let store = store().await;
    let (ta, tb) = (bind().await, bind().await);
    let (a, b) = (
        member(1, 1, ta.local_addr().unwrap().port()),
        member(2, 1, tb.local_addr().unwrap().port()),
    );
    let both = vec![a.clone(), b.clone()];
    let v = view(&both);
    let id = id_coordinated_by(&v, 1);
    let p = partition_led_by(&v, 2);
    let ga = start(ta, a, both.clone(), store.clone());
    let gb = start(tb, b, both, store.clone());

    // Commit: produced at the leader (B, which verifies with A), ended at A.
    let producer = init(ga.addr, &id).await;
    add(ga.addr, &id, producer, p).await;
    let code = settled(|| produce(gb.addr, &id, p, batch(producer, 0, &["c1", "c2"]))).await;
    assert_eq!(code, 0, "transactional produce at the leader");
    let open = fetch_committed(gb.addr, p).await;
    assert_eq!(open.last_stable_offset, 0, "open transaction: {open:?}");
    assert_eq!(end(ga.addr, &id, producer, true).await, 0);
    wait_state(ga.addr, &id, "CompleteCommit").await;
    let committed = wait_stable(gb.addr, p).await;
    // Two records and the commit marker.
    assert_eq!(committed.high_watermark, 3);
    assert!(
        committed
            .aborted_transactions
            .unwrap_or_default()
            .is_empty()
    );

    // Abort: the next transaction's records are listed as aborted.
    add(ga.addr, &id, producer, p).await;
    let code = settled(|| produce(gb.addr, &id, p, batch(producer, 2, &["a1"]))).await;
    assert_eq!(code, 0);
    assert_eq!(end(ga.addr, &id, producer, false).await, 0);
    wait_state(ga.addr, &id, "CompleteAbort").await;
    let aborted = wait_stable(gb.addr, p).await;
    assert_eq!(aborted.high_watermark, 5);
    let listed = aborted.aborted_transactions.unwrap_or_default();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].producer_id, producer.0);
    assert_eq!(listed[0].first_offset, 3);

    // A produce for a partition not in the transaction is refused by verification at B.
    let other = (0..PARTITIONS)
        .find(|q| *q != p && leader(&v, TOPIC, *q) == Some(2))
        .unwrap_or(p);
    if other != p {
        add(ga.addr, &id, producer, p).await;
        let code = produce(gb.addr, &id, other, batch(producer, 0, &["x"])).await;
        assert_eq!(
            code,
            ErrorCode::INVALID_TXN_STATE.code(),
            "unverified produce"
        );
        assert_eq!(end(ga.addr, &id, producer, false).await, 0);
    }
    ga.stop().await;
    gb.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_commit_is_finished_by_the_new_owner() {
    let store = store().await;
    let (ta, tb) = (bind().await, bind().await);
    let (a, b) = (
        member(1, 1, ta.local_addr().unwrap().port()),
        member(2, 1, tb.local_addr().unwrap().port()),
    );
    let both = vec![a.clone(), b.clone()];
    let v = view(&both);
    let id = id_coordinated_by(&v, 1);
    let p = partition_led_by(&v, 2);
    let ga = start(ta, a.clone(), both.clone(), store.clone());
    let gb = start(tb, b, both, store.clone());

    let producer = init(ga.addr, &id).await;
    add(ga.addr, &id, producer, p).await;
    let code = settled(|| produce(gb.addr, &id, p, batch(producer, 0, &["r1", "r2"]))).await;
    assert_eq!(code, 0);

    // The leader goes away: the commit is prepared at A, its marker cannot be written.
    gb.stop().await;
    assert_eq!(end(ga.addr, &id, producer, true).await, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, prepared) = state(ga.addr, &id).await;
    assert_eq!((code, prepared.as_str()), (0, "PrepareCommit"));

    // Node 2 restarts elsewhere and takes everything over: it loads the prepared
    // commit, rebuilds the partition's index from the log and writes the marker.
    let tb2 = bind().await;
    let b2 = member(2, 2, tb2.local_addr().unwrap().port());
    ga.membership.set_members(vec![b2.clone()]);
    let gb2 = start(tb2, b2.clone(), vec![b2], store.clone());
    wait_state(gb2.addr, &id, "CompleteCommit").await;
    let stable = wait_stable(gb2.addr, p).await;
    assert_eq!(stable.high_watermark, 3, "two records and the marker");
    assert!(stable.aborted_transactions.unwrap_or_default().is_empty());
    // The old gateway, out of the view, no longer answers for the id: clients look for
    // the coordinator again.
    let (code, _) = state(ga.addr, &id).await;
    assert!(
        [
            ErrorCode::NOT_COORDINATOR.code(),
            ErrorCode::COORDINATOR_NOT_AVAILABLE.code()
        ]
        .contains(&code),
        "{code}"
    );
    ga.stop().await;
    gb2.stop().await;
}
