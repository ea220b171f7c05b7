//! Consumer groups moving between gateways, through the public [`kafka_broker::Server`]
//! over TCP: two servers on one [`MemoryStore`], each with a [`ManualMembership`] the test
//! sets. A group formed on one continues on the other when its coordinator shard moves
//! (same generation, no rebalance, commits kept), and on a new server after a restart;
//! stored states that are corrupt or too many, and requests while a shard loads, are
//! answered as a broker would.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use bytes::Bytes;
use kafka_broker::cluster::coordinator;
use kafka_broker::session::Listener;
use kafka_broker::store::cluster::{
    LiveView, ManualMembership, Member, MemberListener, group_shard,
};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{
    CommittedOffset, LogStore, NewTopic, OffsetStore, PendingOffsets, StoreError, StoreResult,
    TopicConfig,
};
use kafka_broker::{BrokerConfig, GroupConfig, GroupStateSettings, Server, Stores};
use kafka_groups::{GroupSnapshot, GroupState, MemberSnapshot, Protocol};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::*;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const NONE: i16 = ErrorCode::NONE.code();
const LOADING: i16 = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code();
const NOT_COORDINATOR: i16 = ErrorCode::NOT_COORDINATOR.code();

async fn call(addr: SocketAddr, v: i16, body: RequestBody) -> ResponseBody {
    let key = body.api_key();
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: v,
        correlation_id: 7,
        client_id: Some(ByteString::from_static("handover")),
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

fn member(node_id: i32, port: u16) -> Member {
    Member {
        node_id,
        epoch: 1,
        listeners: vec![MemberListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
        }],
    }
}

async fn memory_store() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 2,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    store
}

fn config(node_id: i32, port: u16, groups: GroupConfig, state: GroupStateSettings) -> BrokerConfig {
    BrokerConfig {
        node_id,
        advertised_port: port,
        groups: GroupConfig {
            initial_rebalance_delay: Duration::from_millis(300),
            ..groups
        },
        group_state: state,
        ..BrokerConfig::default()
    }
}

/// A running server: its address, its membership and how to stop it.
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
        let _ = self.done.await;
    }
}

/// Starts node `me` (bound to `tcp`) on `log` and `offsets`, seeing `view` as live.
fn start(
    tcp: TcpListener,
    me: Member,
    view: Vec<Member>,
    log: Arc<dyn LogStore>,
    offsets: Arc<dyn OffsetStore>,
    config: BrokerConfig,
) -> Gateway {
    let addr = tcp.local_addr().unwrap();
    let membership = Arc::new(ManualMembership::new(me, view));
    let server = Server::new(config, Stores { log, offsets })
        .listener(Listener::plaintext().advertising("127.0.0.1", addr.port()))
        .membership(membership.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        server
            .serve(tcp, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Gateway {
        addr,
        membership,
        stop: Some(stop),
        done,
    }
}

/// One consumer: what it was told by the coordinator.
#[derive(Clone, Debug, Default)]
struct Consumer {
    member_id: String,
    generation: i32,
    leader: bool,
    members: Vec<String>,
}

fn join_request(group: &str, member_id: &str) -> RequestBody {
    join_group_request::JoinGroupRequest {
        group_id: ByteString::from(group.to_owned()),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 5_000,
        member_id: ByteString::from(member_id.to_owned()),
        protocol_type: ByteString::from_static("consumer"),
        protocols: vec![join_group_request::JoinGroupRequestProtocol {
            name: ByteString::from_static("range"),
            metadata: Bytes::from_static(b"\x00\x00"),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

/// JoinGroup v5 as a consumer does it: a first join for an id, then the real one.
async fn join(addr: SocketAddr, group: &str, member_id: &str) -> Result<Consumer, i16> {
    let mut member_id = member_id.to_owned();
    for _ in 0..2 {
        let ResponseBody::JoinGroup(r) = call(addr, 5, join_request(group, &member_id)).await
        else {
            panic!("not join group");
        };
        if r.error_code == ErrorCode::MEMBER_ID_REQUIRED.code() {
            member_id = r.member_id.to_string();
            continue;
        }
        if r.error_code != NONE {
            return Err(r.error_code);
        }
        return Ok(Consumer {
            member_id: r.member_id.to_string(),
            generation: r.generation_id,
            leader: r.leader == r.member_id,
            members: r.members.iter().map(|m| m.member_id.to_string()).collect(),
        });
    }
    panic!("no member id after two joins");
}

async fn sync(addr: SocketAddr, group: &str, c: &Consumer) -> (i16, Bytes) {
    let assignments = c
        .members
        .iter()
        .map(|m| sync_group_request::SyncGroupRequestAssignment {
            member_id: ByteString::from(m.clone()),
            assignment: Bytes::from(format!("for {m}")),
            ..Default::default()
        })
        .collect();
    let req = sync_group_request::SyncGroupRequest {
        group_id: ByteString::from(group.to_owned()),
        generation_id: c.generation,
        member_id: ByteString::from(c.member_id.clone()),
        assignments,
        ..Default::default()
    };
    let ResponseBody::SyncGroup(r) = call(addr, 3, req.into()).await else {
        panic!("not sync group");
    };
    (r.error_code, r.assignment)
}

async fn heartbeat(addr: SocketAddr, group: &str, c: &Consumer) -> i16 {
    let req = heartbeat_request::HeartbeatRequest {
        group_id: ByteString::from(group.to_owned()),
        generation_id: c.generation,
        member_id: ByteString::from(c.member_id.clone()),
        ..Default::default()
    };
    let ResponseBody::Heartbeat(r) = call(addr, 3, req.into()).await else {
        panic!("not heartbeat");
    };
    r.error_code
}

async fn commit(addr: SocketAddr, group: &str, c: &Consumer, offset: i64) -> i16 {
    let req = offset_commit_request::OffsetCommitRequest {
        group_id: ByteString::from(group.to_owned()),
        generation_id_or_member_epoch: c.generation,
        member_id: ByteString::from(c.member_id.clone()),
        topics: vec![offset_commit_request::OffsetCommitRequestTopic {
            name: ByteString::from_static("t"),
            partitions: vec![offset_commit_request::OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::OffsetCommit(r) = call(addr, 8, req.into()).await else {
        panic!("not offset commit");
    };
    r.topics[0].partitions[0].error_code
}

/// OffsetFetch v8 of partition t/0: the group's error and the offset.
async fn fetch(addr: SocketAddr, group: &str) -> (i16, i64) {
    let req = offset_fetch_request::OffsetFetchRequest {
        groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
            group_id: ByteString::from(group.to_owned()),
            topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopics {
                name: ByteString::from_static("t"),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::OffsetFetch(r) = call(addr, 8, req.into()).await else {
        panic!("not offset fetch");
    };
    let g = &r.groups[0];
    let offset = g
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.committed_offset);
    (g.error_code, offset)
}

/// OffsetFetch v1 of partition t/0: the top-level error, and the partition's.
async fn fetch_v1(addr: SocketAddr, group: &str) -> (i16, i16) {
    let req = offset_fetch_request::OffsetFetchRequest {
        group_id: ByteString::from(group.to_owned()),
        topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
            name: ByteString::from_static("t"),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let ResponseBody::OffsetFetch(r) = call(addr, 1, req.into()).await else {
        panic!("not offset fetch");
    };
    let p = r.topics.first().and_then(|t| t.partitions.first());
    (r.error_code, p.map_or(i16::MIN, |p| p.error_code))
}

async fn find_coordinator(addr: SocketAddr, group: &str) -> (i16, i32, i32) {
    let req = find_coordinator_request::FindCoordinatorRequest {
        key: ByteString::from(group.to_owned()),
        ..Default::default()
    };
    let ResponseBody::FindCoordinator(r) = call(addr, 3, req.into()).await else {
        panic!("not find coordinator");
    };
    (r.error_code, r.node_id, r.port)
}

async fn list_groups(addr: SocketAddr) -> (i16, Vec<String>) {
    let req = list_groups_request::ListGroupsRequest::default();
    let ResponseBody::ListGroups(r) = call(addr, 4, req.into()).await else {
        panic!("not list groups");
    };
    (
        r.error_code,
        r.groups.iter().map(|g| g.group_id.to_string()).collect(),
    )
}

async fn describe(addr: SocketAddr, group: &str) -> (i16, String, usize) {
    let req = describe_groups_request::DescribeGroupsRequest {
        groups: vec![ByteString::from(group.to_owned())],
        ..Default::default()
    };
    let ResponseBody::DescribeGroups(r) = call(addr, 5, req.into()).await else {
        panic!("not describe groups");
    };
    let g = &r.groups[0];
    (g.error_code, g.group_state.to_string(), g.members.len())
}

/// Retries `f` while it answers `COORDINATOR_LOAD_IN_PROGRESS` (a shard still loading),
/// as a client would; any other answer is returned.
async fn settled<T, F, Fut>(mut f: F, code: impl Fn(&T) -> i16) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    for _ in 0..200 {
        let out = f().await;
        if code(&out) != LOADING {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still loading after 4 s");
}

/// Two consumers join `group` at `addr` together and sync: Stable, both in one
/// generation.
async fn form(addr: SocketAddr, group: &str, ids: [&str; 2]) -> [Consumer; 2] {
    let (g1, g2) = (group.to_owned(), group.to_owned());
    let (id1, id2) = (ids[0].to_owned(), ids[1].to_owned());
    // The first join parks (the initial delay of a new group, or the rebalance a leader's
    // rejoin starts); the second arrives while it waits. A follower rejoining a Stable
    // group first would just be told the current generation.
    let j1 = tokio::spawn(async move { join(addr, &g1, &id1).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let j2 = tokio::spawn(async move { join(addr, &g2, &id2).await });
    let mut cs = [j1.await.unwrap().unwrap(), j2.await.unwrap().unwrap()];
    assert_eq!(cs[0].generation, cs[1].generation);
    cs.sort_by_key(|c| !c.leader);
    assert!(cs[0].leader && !cs[1].leader, "one leader: {cs:?}");
    // The leader's SyncGroup brings the assignments; the follower then gets its own.
    assert_eq!(sync(addr, group, &cs[0]).await.0, NONE);
    let (e, assignment) = sync(addr, group, &cs[1]).await;
    assert_eq!(e, NONE);
    assert_eq!(assignment, Bytes::from(format!("for {}", cs[1].member_id)));
    cs
}

/// Waits until the store holds a state of `group` in `generation` (written by the
/// coordinator's shard writer, in the background).
async fn stored(store: &MemoryStore, group: &str, generation: i32) -> GroupSnapshot {
    for _ in 0..200 {
        let states = store.group_states(group_shard(group)).await.unwrap();
        if let Some((_, blob)) = states.iter().find(|(g, _)| g == group) {
            let s = GroupSnapshot::decode(blob).unwrap();
            if s.generation == generation {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the state of {group} in generation {generation} was never written");
}

/// Node ids: A = 1 and B = 3, with a node 2 listed but never started. The chosen group's
/// shard is coordinated by 1 among {1, 2} and by 3 among {1, 2, 3}: B joining the view
/// takes the shard over while A stays live.
fn moving_group(members: &[Member]) -> String {
    let view = |ids: &[i32]| LiveView {
        members: members
            .iter()
            .filter(|m| ids.contains(&m.node_id))
            .cloned()
            .collect(),
        version: 1,
    };
    (0..)
        .map(|i| format!("handover-{i}"))
        .find(|g| {
            coordinator(&view(&[1, 2]), g) == Some(1)
                && coordinator(&view(&[1, 2, 3]), g) == Some(3)
        })
        .unwrap()
}

#[tokio::test]
async fn a_group_continues_on_its_new_coordinator_and_after_a_restart() {
    let store = memory_store().await;
    let (ta, tb) = (
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let (pa, pb) = (
        ta.local_addr().unwrap().port(),
        tb.local_addr().unwrap().port(),
    );
    let (m1, m2, m3) = (member(1, pa), member(2, 1), member(3, pb));
    let group = moving_group(&[m1.clone(), m2.clone(), m3.clone()]);
    let state = GroupStateSettings::default();
    let a = start(
        ta,
        m1.clone(),
        vec![m1.clone(), m2.clone()],
        store.clone(),
        store.clone(),
        config(1, pa, GroupConfig::default(), state.clone()),
    );
    let b = start(
        tb,
        m3.clone(),
        vec![m1.clone(), m2.clone()],
        store.clone(),
        store.clone(),
        config(3, pb, GroupConfig::default(), state.clone()),
    );

    // The group forms on A and commits.
    assert_eq!(
        find_coordinator(a.addr, &group).await,
        (NONE, 1, i32::from(pa))
    );
    let [leader, follower] = form(a.addr, &group, ["", ""]).await;
    assert_eq!(leader.generation, 1);
    assert_eq!(commit(a.addr, &group, &leader, 42).await, NONE);
    stored(&store, &group, 1).await;
    // B is not in the view yet: the group is not its to serve.
    assert_eq!(
        heartbeat(b.addr, &group, &leader).await,
        ErrorCode::COORDINATOR_NOT_AVAILABLE.code()
    );

    // B joins: its shard moves to B; A stays live and refers clients on.
    let all = vec![m1.clone(), m2.clone(), m3.clone()];
    a.membership.set_members(all.clone());
    b.membership.set_members(all.clone());
    for gw in [a.addr, b.addr] {
        assert_eq!(find_coordinator(gw, &group).await, (NONE, 3, i32::from(pb)));
    }
    // Once B has loaded the shard, members heartbeat there in their generation: no
    // rebalance.
    let (e, st, n) = settled(|| describe(b.addr, &group), |d| d.0).await;
    assert_eq!((e, st.as_str(), n), (NONE, "Stable", 2));
    for c in [&leader, &follower] {
        assert_eq!(heartbeat(b.addr, &group, c).await, NONE, "{c:?}");
    }
    assert_eq!(heartbeat(a.addr, &group, &leader).await, NOT_COORDINATOR);
    assert_eq!(fetch(a.addr, &group).await.0, NOT_COORDINATOR);
    assert_eq!(fetch_v1(a.addr, &group).await, (NONE, NOT_COORDINATOR));
    assert_eq!(fetch(b.addr, &group).await, (NONE, 42));
    // A commit of the restored generation is accepted by B.
    assert_eq!(commit(b.addr, &group, &follower, 43).await, NONE);

    // The next rebalance on B continues the generation.
    let [leader, follower] = form(
        b.addr,
        &group,
        [leader.member_id.as_str(), follower.member_id.as_str()],
    )
    .await;
    assert_eq!((leader.generation, follower.generation), (2, 2));
    stored(&store, &group, 2).await;

    // B restarts (a new server, same node id, same store): the group goes on.
    b.stop().await;
    let tc = TcpListener::bind(("127.0.0.1", pb)).await.unwrap();
    let c = start(
        tc,
        m3.clone(),
        all.clone(),
        store.clone(),
        store.clone(),
        config(3, pb, GroupConfig::default(), state),
    );
    let (e, st, n) = settled(|| describe(c.addr, &group), |d| d.0).await;
    assert_eq!((e, st.as_str(), n), (NONE, "Stable", 2));
    for m in [&leader, &follower] {
        assert_eq!(heartbeat(c.addr, &group, m).await, NONE, "{m:?}");
    }
    assert_eq!(fetch(c.addr, &group).await, (NONE, 43));
    a.stop().await;
    c.stop().await;
}

/// A Stable state of `group` with one member `m-{group}` in generation 4.
fn snapshot(group: &str) -> GroupSnapshot {
    let id = format!("m-{group}");
    GroupSnapshot {
        group_id: group.into(),
        state: GroupState::Stable,
        generation: 4,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        leader: Some(id.clone()),
        members: vec![MemberSnapshot {
            member_id: id,
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(10),
            protocols: vec![Protocol::new("range", Bytes::from_static(b"\x00\x00"))],
            assignment: Bytes::new(),
        }],
    }
}

fn restored_member(group: &str) -> Consumer {
    Consumer {
        member_id: format!("m-{group}"),
        generation: 4,
        ..Consumer::default()
    }
}

/// A gateway alone on `store`, with `groups` settings.
async fn alone(store: Arc<MemoryStore>, groups: GroupConfig) -> Gateway {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let me = member(1, port);
    start(
        tcp,
        me.clone(),
        vec![me],
        store.clone(),
        store,
        config(1, port, groups, GroupStateSettings::default()),
    )
}

#[tokio::test]
async fn a_corrupt_stored_state_leaves_its_group_to_start_empty() {
    let store = memory_store().await;
    let good = "good";
    let corrupt = (0..)
        .map(|i| format!("corrupt-{i}"))
        .find(|g| group_shard(g) == group_shard(good))
        .unwrap();
    // Claims a 4 GiB group id.
    store
        .put_group_state(&corrupt, Some(Bytes::from_static(b"\x01\xff\xff\xff\xff")))
        .await
        .unwrap();
    store
        .put_group_state(good, Some(snapshot(good).encode()))
        .await
        .unwrap();
    let gw = alone(store.clone(), GroupConfig::default()).await;
    let ghost = Consumer {
        member_id: "m-ghost".into(),
        generation: 1,
        ..Consumer::default()
    };
    let (e, st, _) = settled(|| describe(gw.addr, &corrupt), |d| d.0).await;
    // Unknown (DescribeGroups v5 says Dead; v6 would add GROUP_ID_NOT_FOUND).
    assert_eq!((e, st.as_str()), (NONE, "Dead"));
    assert_eq!(
        heartbeat(gw.addr, &corrupt, &ghost).await,
        ErrorCode::UNKNOWN_MEMBER_ID.code()
    );
    // The good group of the same shard is back, in its generation.
    assert_eq!(heartbeat(gw.addr, good, &restored_member(good)).await, NONE);
    // The corrupt one forms anew, and its state is written over.
    let [c1, _] = form(gw.addr, &corrupt, ["", ""]).await;
    assert_eq!(c1.generation, 1);
    stored(&store, &corrupt, 1).await;
    gw.stop().await;
}

#[tokio::test]
async fn more_stored_groups_than_the_coordinator_holds_stay_within_its_limit() {
    let store = memory_store().await;
    let good: Vec<String> = (0..30).map(|i| format!("many-{i}")).collect();
    for g in &good {
        store
            .put_group_state(g, Some(snapshot(g).encode()))
            .await
            .unwrap();
    }
    let max_groups = 10;
    let gw = alone(
        store.clone(),
        GroupConfig {
            max_groups,
            ..GroupConfig::default()
        },
    )
    .await;
    let (e, listed) = settled(|| list_groups(gw.addr), |(e, _)| *e).await;
    assert_eq!(e, NONE);
    assert_eq!(listed.len(), max_groups, "{listed:?}");
    let mut alive = 0;
    for g in &good {
        match heartbeat(gw.addr, g, &restored_member(g)).await {
            NONE => alive += 1,
            e => assert_eq!(e, ErrorCode::UNKNOWN_MEMBER_ID.code(), "{g}"),
        }
    }
    assert_eq!(alive, max_groups);
    gw.stop().await;
}

/// The memory store, with `acquire_shard` failing a number of times and then held
/// until the test opens the gate.
struct Gated {
    inner: Arc<MemoryStore>,
    open: AtomicBool,
    failures: AtomicUsize,
    acquires: AtomicUsize,
    /// Group-state writes still to fail.
    put_failures: AtomicUsize,
}

#[async_trait]
impl OffsetStore for Gated {
    async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner.commit(group, offsets).await
    }
    async fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        self.inner.fetch(group, topic, partition).await
    }
    async fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        self.inner.fetch_all(group).await
    }
    async fn delete(&self, group: &str, partitions: &[(String, i32)]) -> StoreResult<()> {
        self.inner.delete(group, partitions).await
    }
    async fn delete_group(&self, group: &str) -> StoreResult<()> {
        self.inner.delete_group(group).await
    }
    async fn groups(&self) -> StoreResult<Vec<String>> {
        self.inner.groups().await
    }
    async fn acquire_shard(&self, shard: u32) -> StoreResult<()> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::Unavailable("not yet".into()));
        }
        while !self.open.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.inner.acquire_shard(shard).await
    }
    async fn release_shard(&self, shard: u32) {
        self.inner.release_shard(shard).await;
    }
    async fn put_group_state(&self, group: &str, state: Option<Bytes>) -> StoreResult<()> {
        if self
            .put_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::Unavailable("not now".into()));
        }
        self.inner.put_group_state(group, state).await
    }
    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner.group_states(shard).await
    }
    async fn put_txn_state(&self, id: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.inner.put_txn_state(id, state).await
    }
    async fn txn_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner.txn_states(shard).await
    }
    async fn claim_txn_epoch(&self, shard: u32) -> StoreResult<i32> {
        self.inner.claim_txn_epoch(shard).await
    }
    async fn put_pending_offsets(
        &self,
        g: &str,
        producer_id: i64,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner
            .put_pending_offsets(g, producer_id, offsets)
            .await
    }
    async fn complete_pending_offsets(
        &self,
        g: &str,
        producer_id: i64,
        commit: bool,
    ) -> StoreResult<()> {
        self.inner
            .complete_pending_offsets(g, producer_id, commit)
            .await
    }
    async fn pending_offsets(&self, shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        self.inner.pending_offsets(shard).await
    }
}

#[tokio::test]
async fn requests_while_a_shard_loads_get_the_retriable_code() {
    let inner = memory_store().await;
    let group = "loading";
    inner
        .put_group_state(group, Some(snapshot(group).encode()))
        .await
        .unwrap();
    let gated = Arc::new(Gated {
        inner: inner.clone(),
        open: AtomicBool::new(false),
        failures: AtomicUsize::new(20),
        acquires: AtomicUsize::new(0),
        put_failures: AtomicUsize::new(3),
    });
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let me = member(1, port);
    let gw = start(
        tcp,
        me.clone(),
        vec![me],
        inner.clone(),
        gated.clone(),
        config(
            1,
            port,
            GroupConfig::default(),
            GroupStateSettings {
                load_wait: Duration::from_millis(50),
                load_retry_min: Duration::from_millis(1),
                load_retry_max: Duration::from_millis(2),
                ..GroupStateSettings::default()
            },
        ),
    );
    let m = restored_member(group);
    // FindCoordinator answers at once; the group APIs say "loading" and never block;
    // as in Kafka, Heartbeat is answered blindly and SyncGroup sends the member to rejoin.
    assert_eq!(find_coordinator(gw.addr, group).await.0, NONE);
    let stranger = Consumer {
        member_id: "nobody".into(),
        generation: 9,
        ..Consumer::default()
    };
    assert_eq!(heartbeat(gw.addr, group, &stranger).await, NONE);
    assert_eq!(
        sync(gw.addr, group, &m).await.0,
        ErrorCode::REBALANCE_IN_PROGRESS.code()
    );
    assert_eq!(join(gw.addr, group, "").await.unwrap_err(), LOADING);
    assert_eq!(commit(gw.addr, group, &m, 5).await, LOADING);
    assert_eq!(fetch(gw.addr, group).await.0, LOADING);
    // v1 has no top-level error: the partition carries it.
    assert_eq!(fetch_v1(gw.addr, group).await, (NONE, LOADING));
    assert_eq!(list_groups(gw.addr).await.0, LOADING);
    assert_eq!(describe(gw.addr, group).await.0, LOADING);
    // Failed acquires are retried: 20 failures between the shards, then one held
    // acquire per shard.
    let mut waited = 0;
    while gated.acquires.load(Ordering::SeqCst) < 20 + 16 && waited < 400 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(gated.failures.load(Ordering::SeqCst), 0);
    assert_eq!(gated.acquires.load(Ordering::SeqCst), 20 + 16);
    assert_eq!(describe(gw.addr, group).await.0, LOADING);
    gated.open.store(true, Ordering::SeqCst);
    let (e, st, _) = settled(|| describe(gw.addr, group), |d| d.0).await;
    assert_eq!((e, st.as_str()), (NONE, "Stable"));
    assert_eq!(heartbeat(gw.addr, group, &m).await, NONE);
    assert_eq!(
        heartbeat(gw.addr, group, &stranger).await,
        ErrorCode::UNKNOWN_MEMBER_ID.code()
    );
    assert_eq!(commit(gw.addr, group, &m, 5).await, NONE);
    assert_eq!(fetch(gw.addr, group).await, (NONE, 5));
    assert_eq!(fetch_v1(gw.addr, group).await, (NONE, NONE));
    // The member leaves: the group is Empty in the next generation, and that state
    // reaches the store although the first writes fail.
    let req = leave_group_request::LeaveGroupRequest {
        group_id: ByteString::from_static("loading"),
        members: vec![leave_group_request::MemberIdentity {
            member_id: ByteString::from(m.member_id.clone()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::LeaveGroup(r) = call(gw.addr, 3, req.into()).await else {
        panic!("not leave group");
    };
    assert_eq!((r.error_code, r.members[0].error_code), (NONE, NONE));
    let s = stored(&inner, group, 5).await;
    assert_eq!(s.state, GroupState::Empty);
    assert_eq!(gated.put_failures.load(Ordering::SeqCst), 0);
    gw.stop().await;
}
