//! Scenarios of the classic group protocol, driven through the public API with virtual time.
//!
//! `Harness` plays the driver (clock, timers, response routing); `Client` plays a consumer
//! that remembers its member id and generation, so each test reads as the conversation it
//! checks.

// The harness panics on purpose when a conversation goes wrong.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_groups::*;
use kafka_protocol::ErrorCode;

const SESSION_MS: u64 = 10_000;
const REBALANCE_MS: u64 = 30_000;
const DELAY_MS: u64 = 3_000;

struct Harness {
    c: Coordinator,
    now: Millis,
    next_id: u64,
    answers: HashMap<RequestId, Response>,
}

impl Harness {
    fn new() -> Self {
        Self::with(GroupConfig::default())
    }

    fn with(config: GroupConfig) -> Self {
        Self {
            c: Coordinator::new(config),
            now: Millis(0),
            next_id: 0,
            answers: HashMap::new(),
        }
    }

    fn id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// Collects answers; each request id may be answered once.
    fn drain(&mut self) {
        while let Some((id, r)) = self.c.poll_response() {
            assert!(
                self.answers.insert(id, r).is_none(),
                "{id:?} answered twice"
            );
        }
    }

    /// Moves the clock, firing deadlines on the way as a driver would.
    fn advance(&mut self, ms: u64) {
        let target = Millis(self.now.0 + ms);
        while let Some(at) = self.c.poll_timeout() {
            if at > target {
                break;
            }
            self.now = self.now.max(at);
            self.c.handle_timeout(self.now);
            self.drain();
        }
        self.now = target;
        if let Some(at) = self.c.poll_timeout() {
            assert!(at >= self.now, "deadline in the past");
        }
    }

    fn answered(&mut self, id: RequestId) -> bool {
        self.drain();
        self.answers.contains_key(&id)
    }

    fn take(&mut self, id: RequestId) -> Response {
        self.drain();
        self.answers
            .remove(&id)
            .unwrap_or_else(|| panic!("{id:?} not answered"))
    }

    fn take_join(&mut self, id: RequestId) -> JoinResponse {
        match self.take(id) {
            Response::Join(r) => r,
            other => panic!("expected a join answer, got {other:?}"),
        }
    }

    fn take_sync(&mut self, id: RequestId) -> SyncResponse {
        match self.take(id) {
            Response::Sync(r) => r,
            other => panic!("expected a sync answer, got {other:?}"),
        }
    }

    fn state(&self, group: &str) -> Option<GroupState> {
        self.c.group_state(group)
    }

    // ----- client actions -------------------------------------------------------------

    fn join(&mut self, cl: &Client) -> RequestId {
        let id = self.id();
        self.c.join(self.now, id, cl.join_request());
        self.drain();
        id
    }

    /// Applies a successful join answer to the client.
    fn joined(&mut self, cl: &mut Client, id: RequestId) -> JoinResponse {
        let r = self.take_join(id);
        assert_eq!(r.error, ErrorCode::NONE, "{} join: {r:?}", cl.client_id);
        cl.member_id = r.member_id.clone();
        cl.generation = r.generation_id;
        r
    }

    fn sync(&mut self, cl: &Client, assignments: Vec<MemberAssignment>) -> RequestId {
        let id = self.id();
        self.c.sync(
            self.now,
            id,
            SyncGroup {
                group_id: cl.group.clone(),
                generation_id: cl.generation,
                member_id: cl.member_id.clone(),
                group_instance_id: cl.instance.clone(),
                protocol_type: Some("consumer".into()),
                protocol_name: None,
                assignments,
            },
        );
        self.drain();
        id
    }

    fn heartbeat(&mut self, cl: &Client) -> ErrorCode {
        let id = self.id();
        self.c.heartbeat(
            self.now,
            id,
            Heartbeat {
                group_id: cl.group.clone(),
                generation_id: cl.generation,
                member_id: cl.member_id.clone(),
                group_instance_id: cl.instance.clone(),
            },
        );
        self.take(id).error()
    }

    fn leave(&mut self, group: &str, members: &[(&str, Option<&str>)]) -> LeaveResponse {
        let id = self.id();
        self.c.leave(
            self.now,
            id,
            LeaveGroup {
                group_id: group.into(),
                members: members
                    .iter()
                    .map(|(m, i)| LeavingMember {
                        member_id: (*m).into(),
                        group_instance_id: i.map(Into::into),
                    })
                    .collect(),
            },
        );
        match self.take(id) {
            Response::Leave(r) => r,
            other => panic!("expected a leave answer, got {other:?}"),
        }
    }

    /// Joins every client (already rejoining or new), waits out the initial delay, has the
    /// leader assign `"{member_id}"` to each member and everyone sync: the group is Stable.
    fn drive_to_stable(&mut self, clients: &mut [Client]) {
        let joins: Vec<RequestId> = clients.iter().map(|cl| self.join(cl)).collect();
        // Each member arriving during the initial delay extends it once more.
        for _ in 0..=clients.len() {
            if joins.iter().all(|j| self.answered(*j)) {
                break;
            }
            self.advance(DELAY_MS);
        }
        let mut leader = None;
        for (cl, id) in clients.iter_mut().zip(joins) {
            let r = self.joined(cl, id);
            if r.leader == r.member_id {
                leader = Some(r);
            }
        }
        let leader = leader.expect("a leader");
        let assignments = leader
            .members
            .iter()
            .map(|m| MemberAssignment {
                member_id: m.member_id.clone(),
                assignment: Bytes::from(format!("for {}", m.member_id)),
            })
            .collect();
        let leader_at = clients
            .iter()
            .position(|cl| cl.member_id == leader.member_id)
            .expect("leader client");
        // Followers first, so their SyncGroups are parked until the leader's arrives.
        let mut syncs = vec![RequestId(0); clients.len()];
        for (i, cl) in clients.iter().enumerate() {
            if i != leader_at {
                syncs[i] = self.sync(cl, Vec::new());
                assert!(!self.answered(syncs[i]));
            }
        }
        syncs[leader_at] = self.sync(&clients[leader_at], assignments);
        for (cl, id) in clients.iter().zip(syncs) {
            let r = self.take_sync(id);
            assert_eq!(r.error, ErrorCode::NONE);
            assert_eq!(r.assignment, Bytes::from(format!("for {}", cl.member_id)));
        }
        assert_eq!(self.state(&clients[0].group), Some(GroupState::Stable));
    }
}

#[derive(Clone, Debug)]
struct Client {
    group: String,
    client_id: String,
    instance: Option<String>,
    member_id: String,
    generation: i32,
    session_ms: u64,
    rebalance_ms: u64,
    protocols: Vec<Protocol>,
    require_known_member_id: bool,
}

impl Client {
    fn new(client_id: &str) -> Self {
        Self {
            group: "g".into(),
            client_id: client_id.into(),
            instance: None,
            member_id: String::new(),
            generation: -1,
            session_ms: SESSION_MS,
            rebalance_ms: REBALANCE_MS,
            protocols: vec![Protocol::new("range", format!("sub-{client_id}"))],
            require_known_member_id: false,
        }
    }

    fn static_(client_id: &str, instance: &str) -> Self {
        Self {
            instance: Some(instance.into()),
            ..Self::new(client_id)
        }
    }

    fn join_request(&self) -> JoinGroup {
        JoinGroup {
            group_id: self.group.clone(),
            member_id: self.member_id.clone(),
            group_instance_id: self.instance.clone(),
            session_timeout: Duration::from_millis(self.session_ms),
            rebalance_timeout: Duration::from_millis(self.rebalance_ms),
            protocol_type: "consumer".into(),
            protocols: self.protocols.clone(),
            client_id: self.client_id.clone(),
            client_host: format!("/10.0.0.1:{}", self.client_id.len()),
            reason: None,
            require_known_member_id: self.require_known_member_id,
        }
    }
}

/// Two dynamic members, `a` (the first joiner, so the leader) and `b`, Stable at generation 1.
fn stable_pair(h: &mut Harness) -> (Client, Client) {
    let mut cl = [Client::new("a"), Client::new("b")];
    h.drive_to_stable(&mut cl);
    let [a, b] = cl;
    (a, b)
}

// ----- tests ---------------------------------------------------------------------------------

#[test]
fn two_members_join_and_share_generation_and_leader() {
    let mut h = Harness::new();
    let (mut a, mut b) = (Client::new("a"), Client::new("b"));
    let ja = h.join(&a);
    let jb = h.join(&b);
    assert!(
        !h.answered(ja) && !h.answered(jb),
        "parked for the initial delay"
    );
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));

    h.advance(DELAY_MS);
    assert!(
        !h.answered(ja),
        "b arrived during the delay: it is extended once"
    );
    h.advance(DELAY_MS - 1);
    assert!(!h.answered(ja));
    h.advance(1);
    let ra = h.joined(&mut a, ja);
    let rb = h.joined(&mut b, jb);
    assert_eq!(ra.generation_id, 1);
    assert_eq!(ra.generation_id, rb.generation_id);
    assert_eq!(ra.leader, rb.leader);
    assert_eq!(ra.leader, a.member_id, "the first joiner leads");
    assert_eq!(ra.protocol_name.as_deref(), Some("range"));
    assert_eq!(ra.protocol_type.as_deref(), Some("consumer"));
    assert!(a.member_id.starts_with("a-") && b.member_id.starts_with("b-"));
    assert_ne!(a.member_id, b.member_id);
    // The leader sees everyone's metadata, the follower nothing.
    let mut seen: Vec<_> = ra
        .members
        .iter()
        .map(|m| (m.member_id.clone(), m.metadata.clone()))
        .collect();
    seen.sort();
    let mut want = vec![
        (a.member_id.clone(), Bytes::from("sub-a")),
        (b.member_id.clone(), Bytes::from("sub-b")),
    ];
    want.sort();
    assert_eq!(seen, want);
    assert!(rb.members.is_empty());
    assert_eq!(h.state("g"), Some(GroupState::CompletingRebalance));

    // The follower's SyncGroup waits for the leader's.
    let sb = h.sync(&b, vec![]);
    assert!(!h.answered(sb));
    let sa = h.sync(
        &a,
        vec![MemberAssignment {
            member_id: b.member_id.clone(),
            assignment: Bytes::from_static(b"p0"),
        }],
    );
    let (ra, rb) = (h.take_sync(sa), h.take_sync(sb));
    assert_eq!(rb.assignment, Bytes::from_static(b"p0"));
    assert_eq!(
        ra.assignment,
        Bytes::new(),
        "missing members get an empty assignment"
    );
    assert_eq!(ra.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state("g"), Some(GroupState::Stable));
    assert_eq!(h.heartbeat(&a), ErrorCode::NONE);

    let d = h.c.describe("g").unwrap();
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.protocol, "range");
    assert_eq!(d.members.len(), 2);
    let db = d
        .members
        .iter()
        .find(|m| m.member_id == b.member_id)
        .unwrap();
    assert_eq!(db.client_id, "b");
    assert_eq!(db.metadata, Bytes::from("sub-b"));
    assert_eq!(db.assignment, Bytes::from_static(b"p0"));
}

#[test]
fn kip394_member_id_required_round() {
    let mut h = Harness::new();
    let mut a = Client::new("a");
    a.require_known_member_id = true;
    let j = h.join(&a);
    let r = h.take_join(j);
    assert_eq!(r.error, ErrorCode::MEMBER_ID_REQUIRED);
    assert!(r.member_id.starts_with("a-"));
    assert_eq!(r.generation_id, -1);
    assert_eq!(
        h.state("g"),
        Some(GroupState::Empty),
        "group exists, nobody in it"
    );

    a.member_id = r.member_id.clone();
    let j = h.join(&a);
    h.advance(DELAY_MS);
    let r2 = h.joined(&mut a, j);
    assert_eq!(r2.member_id, r.member_id, "the handed-out id is used");
    assert_eq!(r2.leader, r.member_id);
    assert_eq!(r2.generation_id, 1);
}

#[test]
fn kip394_unused_member_id_expires_after_session_timeout() {
    let mut h = Harness::new();
    let mut a = Client::new("a");
    a.require_known_member_id = true;
    let r = {
        let j = h.join(&a);
        h.take_join(j)
    };
    assert_eq!(r.error, ErrorCode::MEMBER_ID_REQUIRED);
    assert_eq!(h.c.poll_timeout(), Some(Millis(SESSION_MS)));
    h.advance(SESSION_MS);
    assert_eq!(
        h.state("g"),
        None,
        "a group that only held the pending id is dropped"
    );
    a.member_id = r.member_id;
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn pending_member_id_holds_up_the_rebalance_until_it_expires() {
    let mut h = Harness::new();
    let (mut a, mut b) = stable_pair(&mut h);
    // A third consumer got its id but never comes back; a rebalance must not wait forever.
    let mut c = Client::new("c");
    c.require_known_member_id = true;
    let jc = h.join(&c);
    assert_eq!(h.take_join(jc).error, ErrorCode::MEMBER_ID_REQUIRED);
    b.protocols = vec![Protocol::new("range", "sub-b-v2")];
    let jb = h.join(&b);
    let ja = h.join(&a);
    assert!(!h.answered(ja), "waits for the pending member");
    h.advance(SESSION_MS);
    let ra = h.joined(&mut a, ja);
    let rb = h.joined(&mut b, jb);
    assert_eq!(ra.generation_id, 2);
    assert_eq!(rb.generation_id, 2);
}

#[test]
fn member_that_never_syncs_is_removed_at_session_timeout() {
    let mut h = Harness::new();
    let (mut a, mut b) = (Client::new("a"), Client::new("b"));
    let (ja, jb) = (h.join(&a), h.join(&b));
    h.advance(2 * DELAY_MS);
    h.joined(&mut a, ja);
    h.joined(&mut b, jb);
    // The leader syncs and heartbeats; b goes silent after its JoinGroup answer.
    let sa = h.sync(&a, vec![]);
    assert_eq!(h.take_sync(sa).error, ErrorCode::NONE);
    assert_eq!(h.state("g"), Some(GroupState::Stable));
    for _ in 0..3 {
        h.advance(SESSION_MS / 3);
        assert_eq!(h.heartbeat(&a), ErrorCode::NONE);
    }
    h.advance(SESSION_MS / 3);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
    let ja = h.join(&a);
    let r = h.joined(&mut a, ja);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 1);
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn member_that_heartbeats_but_never_syncs_is_removed_at_rebalance_timeout() {
    let mut h = Harness::new();
    let (mut a, mut b) = (Client::new("a"), Client::new("b"));
    a.rebalance_ms = 8_000;
    b.rebalance_ms = 8_000;
    let (ja, jb) = (h.join(&a), h.join(&b));
    h.advance(2 * DELAY_MS);
    h.joined(&mut a, ja);
    h.joined(&mut b, jb);
    let sa = h.sync(&a, vec![]);
    assert_eq!(h.take_sync(sa).error, ErrorCode::NONE);
    for _ in 0..3 {
        h.advance(2_000);
        assert_eq!(h.heartbeat(&a), ErrorCode::NONE);
        assert_eq!(h.heartbeat(&b), ErrorCode::NONE);
    }
    h.advance(2_000);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn heartbeat_during_rebalance_asks_to_rejoin() {
    let mut h = Harness::new();
    let (a, mut b) = stable_pair(&mut h);
    b.protocols = vec![Protocol::new("range", "new-subscription")];
    let jb = h.join(&b);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert!(!h.answered(jb));
    assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
    // SyncGroup is refused too until the rebalance is over.
    let s = h.sync(&a, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::REBALANCE_IN_PROGRESS);
    // A wrong generation is a wrong generation, whatever the state.
    let mut stale = a.clone();
    stale.generation = 0;
    assert_eq!(h.heartbeat(&stale), ErrorCode::ILLEGAL_GENERATION);
}

#[test]
fn leader_leaving_mid_rebalance_hands_leadership_to_a_rejoined_member() {
    let mut h = Harness::new();
    let (a, mut b) = stable_pair(&mut h);
    assert_eq!(h.c.describe("g").unwrap().members.len(), 2);
    b.protocols = vec![Protocol::new("range", "new-subscription")];
    let jb = h.join(&b);
    let left = h.leave("g", &[(&a.member_id, None)]);
    assert_eq!(left.error, ErrorCode::NONE);
    assert_eq!(left.members[0].error, ErrorCode::NONE);
    // b was the only one left and had rejoined: the rebalance completes at once.
    let r = h.joined(&mut b, jb);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.leader, b.member_id);
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.members[0].metadata, Bytes::from("new-subscription"));
}

#[test]
fn leader_not_rejoining_is_replaced_by_a_member_that_did() {
    let mut h = Harness::new();
    let (mut a, mut b) = stable_pair(&mut h);
    b.protocols = vec![Protocol::new("range", "new-subscription")];
    let jb = h.join(&b);
    // The leader stays alive (heartbeats) but does not rejoin.
    for _ in 0..6 {
        h.advance(REBALANCE_MS / 6 - 1);
        assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
    }
    h.advance(6);
    let r = h.joined(&mut b, jb);
    assert_eq!(r.leader, b.member_id);
    assert_eq!(r.members.len(), 1);
    assert_eq!(h.heartbeat(&a), ErrorCode::UNKNOWN_MEMBER_ID);
    // The old leader rejoins as a new member and the group grows again.
    a.member_id.clear();
    let ja = h.join(&a);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    let s = h.sync(&b, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::REBALANCE_IN_PROGRESS);
    let jb = h.join(&b);
    let ra = h.joined(&mut a, ja);
    let rb = h.joined(&mut b, jb);
    assert_eq!((ra.generation_id, rb.generation_id), (3, 3));
    assert_eq!(rb.leader, b.member_id);
}

#[test]
fn all_members_expire_then_group_is_empty_and_can_be_rejoined() {
    let mut h = Harness::new();
    let (mut a, mut b) = stable_pair(&mut h);
    h.advance(SESSION_MS);
    assert_eq!(h.state("g"), Some(GroupState::Empty));
    assert_eq!(h.c.generation("g"), Some(2), "emptying is a generation too");
    assert_eq!(h.c.poll_timeout(), None);
    assert_eq!(h.heartbeat(&a), ErrorCode::UNKNOWN_MEMBER_ID);
    let d = h.c.describe("g").unwrap();
    assert_eq!(d.protocol_type, "consumer");
    assert!(d.members.is_empty());

    a.member_id.clear();
    b.member_id.clear();
    let mut cl = [a, b];
    h.drive_to_stable(&mut cl);
    assert_eq!(cl[0].generation, 3);
}

#[test]
fn static_member_restart_keeps_assignment_without_rebalance() {
    let mut h = Harness::new();
    let mut cl = [Client::static_("a", "inst-a"), Client::new("b")];
    h.drive_to_stable(&mut cl);
    let [a, b] = cl;
    let generation = h.c.generation("g").unwrap();
    let old = a.clone();

    // The process restarts: no member id, same instance id, within the session timeout.
    h.advance(SESSION_MS / 2);
    let mut a2 = Client {
        member_id: String::new(),
        ..a.clone()
    };
    let j = h.join(&a2);
    let r = h.joined(&mut a2, j);
    assert_ne!(a2.member_id, old.member_id);
    assert!(a2.member_id.starts_with("inst-a-"));
    assert_eq!(r.generation_id, generation);
    assert_eq!(
        r.leader, old.member_id,
        "the old leader id, so it does not assign"
    );
    assert!(r.members.is_empty());
    assert_eq!(h.state("g"), Some(GroupState::Stable), "no rebalance");

    let s = h.sync(&a2, vec![]);
    let s = h.take_sync(s);
    assert_eq!(s.error, ErrorCode::NONE);
    assert_eq!(s.assignment, Bytes::from(format!("for {}", old.member_id)));
    assert_eq!(h.heartbeat(&b), ErrorCode::NONE, "others are undisturbed");
    assert_eq!(h.heartbeat(&a2), ErrorCode::NONE);

    // The old incarnation is fenced.
    assert_eq!(h.heartbeat(&old), ErrorCode::FENCED_INSTANCE_ID);
    let s = h.sync(&old, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::FENCED_INSTANCE_ID);
    let j = h.join(&old);
    assert_eq!(h.take_join(j).error, ErrorCode::FENCED_INSTANCE_ID);
    assert_eq!(
        h.c.validate_commit(h.now, "g", generation, &old.member_id, Some("inst-a")),
        Err(ErrorCode::FENCED_INSTANCE_ID)
    );
    let left = h.leave("g", &[(&old.member_id, Some("inst-a"))]);
    assert_eq!(left.members[0].error, ErrorCode::FENCED_INSTANCE_ID);
    assert_eq!(h.c.generation("g"), Some(generation));
}

#[test]
fn static_member_restart_with_other_protocol_rebalances() {
    let mut h = Harness::new();
    let mut cl = [Client::static_("a", "inst-a")];
    h.drive_to_stable(&mut cl);
    let [a] = cl;
    let mut a2 = Client {
        member_id: String::new(),
        protocols: vec![Protocol::new("sticky", "x"), Protocol::new("range", "y")],
        ..a.clone()
    };
    let j = h.join(&a2);
    // Alone, it now votes for `sticky`: the selected protocol changes, so it rebalances
    // (and completes at once: it is the only member and has rejoined).
    let r = h.joined(&mut a2, j);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.protocol_name.as_deref(), Some("sticky"));
    assert_eq!(r.leader, a2.member_id);
}

#[test]
fn static_member_not_rejoining_stays_until_its_session_expires() {
    let mut h = Harness::new();
    let mut cl = [Client::new("a"), Client::static_("s", "inst-s")];
    cl[1].session_ms = 60_000;
    h.drive_to_stable(&mut cl);
    let [mut a, s] = cl;
    a.protocols = vec![Protocol::new("range", "v2")];
    let ja = h.join(&a);
    h.advance(REBALANCE_MS);
    let r = h.joined(&mut a, ja);
    assert_eq!(r.generation_id, 2);
    assert_eq!(
        r.members.len(),
        2,
        "the absent static member keeps its place"
    );
    let mut s = s;
    s.generation = 2;
    assert_eq!(h.heartbeat(&s), ErrorCode::NONE);
}

#[test]
fn static_member_restart_during_completing_rebalance_fences_and_rebalances() {
    let mut h = Harness::new();
    let (mut s, mut b) = (Client::static_("s", "inst-s"), Client::new("b"));
    let (js, jb) = (h.join(&s), h.join(&b));
    h.advance(2 * DELAY_MS);
    h.joined(&mut s, js);
    h.joined(&mut b, jb);
    let sb = h.sync(&b, vec![]);
    let old_sync = h.sync(&s, vec![]); // s leads; its sync completes the round at once
    assert_eq!(h.take_sync(old_sync).error, ErrorCode::NONE);
    assert_eq!(h.take_sync(sb).error, ErrorCode::NONE);

    // Now a rebalance, and during CompletingRebalance s restarts.
    b.protocols = vec![Protocol::new("range", "v2")];
    let jb = h.join(&b);
    let js = h.join(&s);
    h.joined(&mut b, jb);
    h.joined(&mut s, js);
    let s_follower_sync = h.sync(&b, vec![]);
    let mut s2 = Client {
        member_id: String::new(),
        ..s.clone()
    };
    let j2 = h.join(&s2);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.take_sync(s_follower_sync).error,
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert_eq!(h.heartbeat(&s), ErrorCode::FENCED_INSTANCE_ID);
    let jb = h.join(&b);
    let r = h.joined(&mut s2, j2);
    h.joined(&mut b, jb);
    assert_eq!(r.generation_id, 3);
}

#[test]
fn session_timeout_of_one_member_rebalances_the_survivor() {
    let mut h = Harness::new();
    let (mut a, b) = stable_pair(&mut h);
    for _ in 0..4 {
        h.advance(SESSION_MS / 4 - 1);
        assert_eq!(h.heartbeat(&a), ErrorCode::NONE);
    }
    h.advance(4);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
    let j = h.join(&a);
    let r = h.joined(&mut a, j);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.leader, a.member_id);
    assert_eq!(r.members.len(), 1);
}

#[test]
fn rebalance_timeout_removes_members_that_do_not_rejoin() {
    let mut h = Harness::new();
    let mut cl = [Client::new("a"), Client::new("b"), Client::new("c")];
    h.drive_to_stable(&mut cl);
    let [mut a, b, c] = cl;
    // The leader rejoining forces a rebalance even with unchanged metadata.
    let ja = h.join(&a);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    for _ in 0..5 {
        h.advance(REBALANCE_MS / 5 - 1);
        assert_eq!(h.heartbeat(&b), ErrorCode::REBALANCE_IN_PROGRESS);
        assert!(!h.answered(ja));
    }
    h.advance(5);
    let r = h.joined(&mut a, ja);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 1);
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&c), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn follower_rejoining_stable_group_unchanged_gets_current_generation() {
    let mut h = Harness::new();
    let (_a, b) = stable_pair(&mut h);
    let j = h.join(&b);
    let r = h.take_join(j);
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!(r.generation_id, 1);
    assert_eq!(h.state("g"), Some(GroupState::Stable));
}

#[test]
fn superseded_requests_are_answered() {
    let mut h = Harness::new();
    let (a, mut b) = stable_pair(&mut h);
    b.protocols = vec![Protocol::new("range", "v2")];
    let first = h.join(&b);
    let second = h.join(&b);
    assert_eq!(h.take_join(first).error, ErrorCode::REBALANCE_IN_PROGRESS);
    let mut a = a;
    let ja = h.join(&a);
    h.joined(&mut a, ja);
    h.joined(&mut b, second);
    // A follower's repeated SyncGroup replaces the parked one.
    let s1 = h.sync(&b, vec![]);
    let s2 = h.sync(&b, vec![]);
    assert_eq!(h.take_sync(s1).error, ErrorCode::REBALANCE_IN_PROGRESS);
    let sa = h.sync(&a, vec![]);
    assert_eq!(h.take_sync(sa).error, ErrorCode::NONE);
    assert_eq!(h.take_sync(s2).error, ErrorCode::NONE);
}

#[test]
fn new_member_parked_too_long_is_dropped() {
    let config = GroupConfig {
        new_member_join_timeout: Duration::from_secs(20),
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let (mut a, mut b) = stable_pair(&mut h);
    // A new member arrives; the others stay alive but are slow to rejoin, and the
    // rebalance timeout (60 s) is longer than the new-member timeout (20 s).
    let mut c = Client::new("c");
    c.rebalance_ms = 60_000;
    let jc = h.join(&c);
    for _ in 0..4 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
        assert_eq!(h.heartbeat(&b), ErrorCode::REBALANCE_IN_PROGRESS);
    }
    let r = h.take_join(jc);
    assert_eq!(r.error, ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(r.member_id, "");
    let (ja, jb) = (h.join(&a), h.join(&b));
    assert_eq!(h.joined(&mut a, ja).members.len(), 2);
    assert_eq!(h.joined(&mut b, jb).generation_id, 2);
}

#[test]
fn initial_delay_extends_while_members_arrive_up_to_the_rebalance_timeout() {
    let mut h = Harness::new();
    let mut clients: Vec<Client> = (0..6).map(|i| Client::new(&format!("c{i}"))).collect();
    for cl in &mut clients {
        cl.rebalance_ms = 10_000;
    }
    // Joins at 0, 2.5, 5, 7.5 and 9.5 s. The 3 s delay fires at 3 s, sees a newcomer and
    // waits 3 s more; likewise at 6 s; at 9 s only 1 s of the rebalance timeout remains.
    let mut joins = vec![h.join(&clients[0])];
    for (cl, at) in clients[1..5].iter().zip([2_500, 5_000, 7_500, 9_500]) {
        h.advance(at - h.now.0);
        joins.push(h.join(cl));
    }
    h.advance(10_000 - 1 - h.now.0);
    assert!(!h.answered(joins[0]));
    h.advance(1);
    let ids: Vec<_> = joins.iter().map(|j| h.take_join(*j)).collect();
    assert!(
        ids.iter()
            .all(|r| r.error == ErrorCode::NONE && r.generation_id == 1)
    );
    assert_eq!(ids[0].members.len(), 5);
    // A latecomer after completion starts the next rebalance instead.
    h.join(&clients[5]);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
}

#[test]
fn initial_delay_without_more_members_completes_after_one_delay() {
    let mut h = Harness::new();
    let a = Client::new("a");
    let j = h.join(&a);
    assert_eq!(h.c.poll_timeout(), Some(Millis(DELAY_MS)));
    h.advance(DELAY_MS);
    assert_eq!(h.take_join(j).generation_id, 1);
}

#[test]
fn zero_initial_delay_answers_a_lone_member_at_once() {
    let config = GroupConfig {
        initial_rebalance_delay: Duration::ZERO,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let j = h.join(&Client::new("a"));
    assert_eq!(h.take_join(j).generation_id, 1);
}

#[test]
fn protocol_is_chosen_by_vote_among_common_protocols() {
    let mut h = Harness::new();
    let mut a = Client::new("a");
    a.protocols = vec![
        Protocol::new("sticky", "a"),
        Protocol::new("range", "a"),
        Protocol::new("roundrobin", "a"),
    ];
    let mut b = Client::new("b");
    b.protocols = vec![
        Protocol::new("roundrobin", "b"),
        Protocol::new("range", "b"),
    ];
    let mut c = Client::new("c");
    c.protocols = vec![
        Protocol::new("range", "c"),
        Protocol::new("roundrobin", "c"),
    ];
    let mut d = Client::new("d");
    d.protocols = vec![
        Protocol::new("range", "d"),
        Protocol::new("roundrobin", "d"),
    ];
    // Common: range, roundrobin. Votes: a range, b roundrobin, c range, d range.
    let js: Vec<_> = [&a, &b, &c, &d].iter().map(|cl| h.join(cl)).collect();
    h.advance(2 * DELAY_MS);
    let r = h.joined(&mut a, js[0]);
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert!(r.members.iter().all(|m| m.metadata.len() == 1));
    // A newcomer without a common protocol is refused.
    let mut e = Client::new("e");
    e.protocols = vec![Protocol::new("sticky", "e")];
    let je = h.join(&e);
    assert_eq!(
        h.take_join(je).error,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut f = Client::new("f");
    f.protocols = vec![Protocol::new("range", "f")];
    let jf = h.join(&Client { ..f.clone() });
    assert!(!h.answered(jf), "a common protocol is enough");
    f.protocols.clear();
}

#[test]
fn bad_joins_are_refused() {
    let mut h = Harness::new();
    let mut a = Client::new("a");
    a.session_ms = 5_999;
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::INVALID_SESSION_TIMEOUT);
    a.session_ms = 30 * 60 * 1000 + 1;
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::INVALID_SESSION_TIMEOUT);
    a.session_ms = SESSION_MS;
    a.group.clear();
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::INVALID_GROUP_ID);
    a.group = "g".into();
    a.protocols.clear();
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    a.protocols = vec![Protocol::new("range", "x")];
    a.member_id = "made-up".into();
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_MEMBER_ID);
    assert!(
        h.c.list(&[]).is_empty(),
        "failed joins leave no groups behind"
    );

    // A different protocol type than the group's.
    let a = Client::new("a");
    h.join(&a);
    let mut b = Client::new("b");
    let mut req = b.join_request();
    req.protocol_type = "connect".into();
    let id = h.id();
    h.c.join(h.now, id, req);
    assert_eq!(
        h.take_join(id).error,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    b.member_id = "nope".into();
    let j = h.join(&b);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn metadata_above_the_cap_is_refused() {
    let config = GroupConfig {
        max_metadata_bytes: 100,
        max_protocols_per_member: 2,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let mut a = Client::new("a");
    a.protocols = vec![Protocol::new("range", vec![0u8; 96])];
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_SERVER_ERROR);
    a.protocols = vec![
        Protocol::new("a", "x"),
        Protocol::new("b", "x"),
        Protocol::new("c", "x"),
    ];
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_SERVER_ERROR);
    a.protocols = vec![Protocol::new("range", vec![0u8; 95])];
    let j = h.join(&a);
    h.advance(DELAY_MS);
    assert_eq!(h.take_join(j).error, ErrorCode::NONE);
}

#[test]
fn oversized_assignment_fails_the_round_and_rebalances() {
    let config = GroupConfig {
        max_assignment_bytes: 10,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let (mut a, mut b) = (Client::new("a"), Client::new("b"));
    let (ja, jb) = (h.join(&a), h.join(&b));
    h.advance(2 * DELAY_MS);
    h.joined(&mut a, ja);
    h.joined(&mut b, jb);
    let sb = h.sync(&b, vec![]);
    let sa = h.sync(
        &a,
        vec![MemberAssignment {
            member_id: b.member_id.clone(),
            assignment: Bytes::from(vec![0u8; 11]),
        }],
    );
    assert_eq!(h.take_sync(sa).error, ErrorCode::UNKNOWN_SERVER_ERROR);
    assert_eq!(h.take_sync(sb).error, ErrorCode::UNKNOWN_SERVER_ERROR);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
}

#[test]
fn group_max_size_is_enforced() {
    let config = GroupConfig {
        max_members_per_group: 2,
        max_pending_members_per_group: 1,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let (a, b) = stable_pair(&mut h);
    let c = Client::new("c");
    let j = h.join(&c);
    let r = h.take_join(j);
    assert_eq!(r.error, ErrorCode::GROUP_MAX_SIZE_REACHED);
    assert_eq!(r.member_id, "");
    assert_eq!(h.c.describe("g").unwrap().members.len(), 2);
    assert_eq!(h.state("g"), Some(GroupState::Stable));

    // Existing members still rejoin fine.
    let j = h.join(&a);
    assert!(!h.answered(j));
    let _ = b;

    // KIP-394 ids handed out but not used yet are capped too.
    let mut d = Client::new("d");
    d.group = "other".into();
    d.require_known_member_id = true;
    let j = h.join(&d);
    assert_eq!(h.take_join(j).error, ErrorCode::MEMBER_ID_REQUIRED);
    let j = h.join(&d);
    assert_eq!(h.take_join(j).error, ErrorCode::GROUP_MAX_SIZE_REACHED);
}

#[test]
fn full_group_still_takes_back_a_restarting_static_member() {
    let config = GroupConfig {
        max_members_per_group: 2,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let mut cl = [Client::new("a"), Client::static_("s", "inst-s")];
    h.drive_to_stable(&mut cl);
    let [_a, s] = cl;
    let mut s2 = Client {
        member_id: String::new(),
        ..s.clone()
    };
    let j = h.join(&s2);
    let r = h.joined(&mut s2, j);
    assert_eq!(r.generation_id, 1);
    assert_eq!(h.c.describe("g").unwrap().members.len(), 2);
    // A genuinely new static member is still refused.
    let j = h.join(&Client::static_("t", "inst-t"));
    assert_eq!(h.take_join(j).error, ErrorCode::GROUP_MAX_SIZE_REACHED);
}

#[test]
fn group_max_size_counts_rejoined_members_while_preparing() {
    let config = GroupConfig {
        max_members_per_group: 2,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let (mut a, mut b) = stable_pair(&mut h);
    // a rejoins (leader: forces a rebalance); a newcomer takes the second seat before b
    // rejoins; b, arriving last, is turned away and dropped, as in Kafka.
    let ja = h.join(&a);
    let mut c = Client::new("c");
    let jc = h.join(&c);
    let jb = h.join(&b);
    let r = h.take_join(jb);
    assert_eq!(r.error, ErrorCode::GROUP_MAX_SIZE_REACHED);
    let ra = h.joined(&mut a, ja);
    h.joined(&mut c, jc);
    assert_eq!(ra.members.len(), 2);
    b.generation = ra.generation_id;
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn max_groups_evicts_the_longest_empty_group_or_refuses() {
    let config = GroupConfig {
        max_groups: 2,
        ..GroupConfig::default()
    };
    let mut h = Harness::with(config);
    let mut x = Client::new("x");
    x.group = "x".into();
    let mut y = Client::new("y");
    y.group = "y".into();
    h.drive_to_stable(std::slice::from_mut(&mut x));
    h.drive_to_stable(std::slice::from_mut(&mut y));
    let mut z = Client::new("z");
    z.group = "z".into();
    let j = h.join(&z);
    assert_eq!(h.take_join(j).error, ErrorCode::COORDINATOR_NOT_AVAILABLE);

    let left = h.leave("x", &[(&x.member_id, None)]);
    assert_eq!(left.members[0].error, ErrorCode::NONE);
    assert_eq!(h.state("x"), Some(GroupState::Empty));
    let j = h.join(&z);
    assert!(!h.answered(j));
    assert_eq!(h.state("x"), None, "the empty group made room");
    assert_eq!(h.c.list(&[]).len(), 2);
}

#[test]
fn leave_group_single_batched_and_by_instance_id() {
    let mut h = Harness::new();
    let mut cl = [
        Client::new("a"),
        Client::new("b"),
        Client::static_("s", "inst-s"),
    ];
    h.drive_to_stable(&mut cl);
    let [a, b, s] = cl;
    let r = h.leave(
        "g",
        &[
            (&b.member_id, None),
            ("unknown", None),
            ("", Some("inst-s")),
            ("", Some("inst-unknown")),
        ],
    );
    assert_eq!(r.error, ErrorCode::NONE);
    let errors: Vec<_> = r.members.iter().map(|m| m.error).collect();
    assert_eq!(
        errors,
        [
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_MEMBER_ID
        ]
    );
    assert_eq!(r.members[2].group_instance_id.as_deref(), Some("inst-s"));
    assert_eq!(h.heartbeat(&s), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);

    let r = h.leave("nope", &[(&a.member_id, None)]);
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!(r.members[0].error, ErrorCode::UNKNOWN_MEMBER_ID);
    let r = h.leave("", &[(&a.member_id, None)]);
    assert_eq!(r.error, ErrorCode::INVALID_GROUP_ID);
}

#[test]
fn leaving_member_with_parked_join_gets_an_answer() {
    let mut h = Harness::new();
    let a = Client::new("a");
    let j = h.join(&a);
    let d = h.c.describe("g").unwrap();
    let member_id = d.members[0].member_id.clone();
    assert_eq!(d.state, GroupState::PreparingRebalance);
    assert_eq!(d.protocol, "", "no protocol before Stable");
    assert_eq!(d.members[0].metadata, Bytes::new());
    let r = h.leave("g", &[(&member_id, None)]);
    assert_eq!(r.members[0].error, ErrorCode::NONE);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_MEMBER_ID);
    h.advance(DELAY_MS);
    assert_eq!(h.state("g"), Some(GroupState::Empty));
}

#[test]
fn sync_validation() {
    let mut h = Harness::new();
    let (a, _b) = stable_pair(&mut h);
    let mut stale = a.clone();
    stale.generation = 7;
    let s = h.sync(&stale, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::ILLEGAL_GENERATION);
    let mut unknown = a.clone();
    unknown.member_id = "who".into();
    let s = h.sync(&unknown, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::UNKNOWN_MEMBER_ID);
    let id = h.id();
    h.c.sync(
        h.now,
        id,
        SyncGroup {
            group_id: "g".into(),
            generation_id: a.generation,
            member_id: a.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("roundrobin".into()),
            assignments: vec![],
        },
    );
    assert_eq!(
        h.take_sync(id).error,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut elsewhere = a.clone();
    elsewhere.group = "other".into();
    let s = h.sync(&elsewhere, vec![]);
    assert_eq!(h.take_sync(s).error, ErrorCode::UNKNOWN_MEMBER_ID);
    // In Stable, a SyncGroup just returns the member's assignment again.
    let s = h.sync(&a, vec![]);
    let s = h.take_sync(s);
    assert_eq!(s.assignment, Bytes::from(format!("for {}", a.member_id)));
}

#[test]
fn validate_commit_follows_kafka_rules() {
    let mut h = Harness::new();
    let now = h.now;
    // Unknown group: simple commits only.
    assert_eq!(h.c.validate_commit(now, "free", -1, "", None), Ok(()));
    assert_eq!(
        h.c.validate_commit(now, "free", 1, "m", None),
        Err(ErrorCode::ILLEGAL_GENERATION)
    );
    assert_eq!(
        h.c.validate_commit(now, "free", -1, "m", None),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        h.c.validate_commit(now, "", -1, "", None),
        Err(ErrorCode::INVALID_GROUP_ID)
    );

    let (a, b) = stable_pair(&mut h);
    let now = h.now;
    assert_eq!(h.c.validate_commit(now, "g", 1, &a.member_id, None), Ok(()));
    assert_eq!(
        h.c.validate_commit(now, "g", -1, "", None),
        Err(ErrorCode::UNKNOWN_MEMBER_ID),
        "no simple commits into a group with members"
    );
    assert_eq!(
        h.c.validate_commit(now, "g", 1, "stranger", None),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
    assert_eq!(
        h.c.validate_commit(now, "g", 0, &a.member_id, None),
        Err(ErrorCode::ILLEGAL_GENERATION)
    );

    // PreparingRebalance: members of the current generation may still commit.
    let mut b2 = b.clone();
    b2.protocols = vec![Protocol::new("range", "v2")];
    let jb = h.join(&b2);
    assert_eq!(
        h.c.validate_commit(h.now, "g", 1, &a.member_id, None),
        Ok(())
    );
    // CompletingRebalance: the member must finish the rebalance first.
    let mut a = a;
    let ja = h.join(&a);
    h.joined(&mut a, ja);
    let mut b2 = b2;
    h.joined(&mut b2, jb);
    assert_eq!(
        h.c.validate_commit(h.now, "g", 2, &a.member_id, None),
        Err(ErrorCode::REBALANCE_IN_PROGRESS)
    );
    // A commit counts as a heartbeat.
    let sa = h.sync(&a, vec![]);
    let sb = h.sync(&b2, vec![]);
    h.take_sync(sa);
    h.take_sync(sb);
    for _ in 0..4 {
        h.advance(SESSION_MS / 2);
        assert_eq!(
            h.c.validate_commit(h.now, "g", 2, &a.member_id, None),
            Ok(())
        );
        assert_eq!(h.heartbeat(&b2), ErrorCode::NONE);
    }
    // Empty again: simple commits are allowed.
    h.leave("g", &[(&a.member_id, None), (&b2.member_id, None)]);
    assert_eq!(h.state("g"), Some(GroupState::Empty));
    assert_eq!(h.c.validate_commit(h.now, "g", -1, "", None), Ok(()));
    assert_eq!(
        h.c.validate_commit(h.now, "g", 3, "", None),
        Err(ErrorCode::UNKNOWN_MEMBER_ID)
    );
}

#[test]
fn delete_only_empty_groups() {
    let mut h = Harness::new();
    assert_eq!(h.c.delete("g"), Err(ErrorCode::GROUP_ID_NOT_FOUND));
    let (a, b) = stable_pair(&mut h);
    assert_eq!(h.c.delete("g"), Err(ErrorCode::NON_EMPTY_GROUP));
    h.leave("g", &[(&a.member_id, None)]);
    assert_eq!(h.c.delete("g"), Err(ErrorCode::NON_EMPTY_GROUP));
    h.leave("g", &[(&b.member_id, None)]);
    assert_eq!(h.state("g"), Some(GroupState::Empty));
    assert_eq!(h.c.delete("g"), Ok(()));
    assert_eq!(h.state("g"), None);
    assert_eq!(h.c.describe("g"), None);
    assert_eq!(h.c.delete("g"), Err(ErrorCode::GROUP_ID_NOT_FOUND));
    assert_eq!(h.c.poll_timeout(), None);
}

#[test]
fn delete_forgets_outstanding_member_ids() {
    let mut h = Harness::new();
    let mut a = Client::new("a");
    a.require_known_member_id = true;
    let j = h.join(&a);
    let r = h.take_join(j);
    assert_eq!(h.c.delete("g"), Ok(()));
    assert_eq!(h.c.poll_timeout(), None);
    a.member_id = r.member_id;
    let j = h.join(&a);
    assert_eq!(h.take_join(j).error, ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn list_filters_by_state() {
    let mut h = Harness::new();
    let mut x = Client::new("x");
    x.group = "stable".into();
    h.drive_to_stable(std::slice::from_mut(&mut x));
    let mut z = Client::new("z");
    z.group = "empty".into();
    h.drive_to_stable(std::slice::from_mut(&mut z));
    h.leave("empty", &[(&z.member_id, None)]);
    let mut y = Client::new("y");
    y.group = "preparing".into();
    h.join(&y);

    let all = h.c.list(&[]);
    let names: Vec<_> = all.iter().map(|g| g.group_id.as_str()).collect();
    assert_eq!(names, ["empty", "preparing", "stable"]);
    assert!(all.iter().all(|g| g.protocol_type == "consumer"));
    let stable = h.c.list(&[GroupState::Stable]);
    assert_eq!(stable.len(), 1);
    assert_eq!(stable[0].group_id, "stable");
    let some =
        h.c.list(&[GroupState::Empty, GroupState::PreparingRebalance]);
    assert_eq!(some.len(), 2);
    assert!(h.c.list(&[GroupState::Dead]).is_empty());
    assert_eq!(
        GroupState::parse("preparingrebalance"),
        Some(GroupState::PreparingRebalance)
    );
    assert_eq!(GroupState::parse("Asleep"), None);
}

#[test]
fn error_codes_are_kafkas() {
    let codes = [
        (ErrorCode::NONE, 0),
        (ErrorCode::UNKNOWN_SERVER_ERROR, -1),
        (ErrorCode::COORDINATOR_NOT_AVAILABLE, 15),
        (ErrorCode::ILLEGAL_GENERATION, 22),
        (ErrorCode::INCONSISTENT_GROUP_PROTOCOL, 23),
        (ErrorCode::INVALID_GROUP_ID, 24),
        (ErrorCode::UNKNOWN_MEMBER_ID, 25),
        (ErrorCode::INVALID_SESSION_TIMEOUT, 26),
        (ErrorCode::REBALANCE_IN_PROGRESS, 27),
        (ErrorCode::NON_EMPTY_GROUP, 68),
        (ErrorCode::GROUP_ID_NOT_FOUND, 69),
        (ErrorCode::MEMBER_ID_REQUIRED, 79),
        (ErrorCode::GROUP_MAX_SIZE_REACHED, 81),
        (ErrorCode::FENCED_INSTANCE_ID, 82),
    ];
    for (e, code) in codes {
        assert_eq!(e.code(), code, "{e:?}");
    }
}

#[test]
fn member_ids_are_reproducible_from_the_seed() {
    let run = |seed| {
        let config = GroupConfig {
            member_id_seed: seed,
            ..GroupConfig::default()
        };
        let mut h = Harness::with(config);
        let j = h.join(&Client::new("a"));
        h.advance(DELAY_MS);
        h.take_join(j).member_id
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn huge_rebalance_timeout_is_held_to_the_maximum() {
    let mut h = Harness::with(GroupConfig {
        max_rebalance_timeout: Duration::from_millis(REBALANCE_MS),
        ..GroupConfig::default()
    });
    let mut cl = [Client::new("a"), Client::new("b")];
    // b asks for the largest timeout the wire allows (about 24.8 days), then keeps
    // heartbeating without ever rejoining.
    cl[1].rebalance_ms = i32::MAX as u64;
    h.drive_to_stable(&mut cl);
    let [mut a, b] = cl;
    let ja = h.join(&a);
    assert_eq!(h.state("g"), Some(GroupState::PreparingRebalance));
    for _ in 0..5 {
        h.advance(REBALANCE_MS / 5 - 1);
        assert_eq!(h.heartbeat(&b), ErrorCode::REBALANCE_IN_PROGRESS);
        assert!(!h.answered(ja));
    }
    h.advance(6);
    let r = h.joined(&mut a, ja);
    assert_eq!(
        r.members.len(),
        1,
        "the silent member was removed at the bound"
    );
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn long_client_ids_make_member_ids_that_fit_the_wire() {
    let mut h = Harness::new();
    let mut cl = [Client::new(&"x".repeat(32 * 1024))];
    h.drive_to_stable(&mut cl);
    let member = &cl[0].member_id;
    assert!(member.len() <= MAX_ID_PREFIX_BYTES + 37, "{}", member.len());
    let described = h.c.describe("g").expect("group exists");
    assert!(described.members[0].client_id.len() <= MAX_ID_PREFIX_BYTES);
}

#[test]
fn overlong_group_and_instance_ids_are_refused() {
    let mut h = Harness::with(GroupConfig {
        max_id_bytes: 8,
        ..GroupConfig::default()
    });
    let mut cl = Client::new("a");
    cl.group = "g".repeat(9);
    let j = h.join(&cl);
    assert_eq!(h.take_join(j).error, ErrorCode::INVALID_GROUP_ID);
    let mut cl = Client::static_("a", &"i".repeat(9));
    cl.group = "g".into();
    let j = h.join(&cl);
    assert_eq!(h.take_join(j).error, ErrorCode::INVALID_REQUEST);
    assert_eq!(
        h.c.validate_commit(h.now, &"g".repeat(9), -1, "", None),
        Err(ErrorCode::INVALID_GROUP_ID)
    );
    assert_eq!(h.c.validate_commit(h.now, "g", -1, "", None), Ok(()));
}

#[test]
fn coordinator_wide_caps_hold_across_groups() {
    let mut h = Harness::with(GroupConfig {
        max_pending_members: 3,
        max_state_bytes: 600,
        initial_rebalance_delay: Duration::ZERO,
        ..GroupConfig::default()
    });
    // KIP-394 ids over all groups: the fourth group's newcomer must retry later.
    for (i, group) in ["p1", "p2", "p3", "p4"].into_iter().enumerate() {
        let mut cl = Client::new("k");
        cl.group = group.into();
        cl.require_known_member_id = true;
        let j = h.join(&cl);
        let expected = if i < 3 {
            ErrorCode::MEMBER_ID_REQUIRED
        } else {
            ErrorCode::COORDINATOR_NOT_AVAILABLE
        };
        assert_eq!(h.take_join(j).error, expected, "{group}");
    }
    // Member bytes over all groups: a member with 40 bytes of protocol costs about 350 with
    // its ids and the fixed overhead, so the second one does not fit in 600.
    let mut a = Client::new("a");
    a.group = "m1".into();
    a.protocols = vec![Protocol::new("range", vec![0u8; 35])];
    let j = h.join(&a);
    h.joined(&mut a, j);
    let mut b = Client::new("b");
    b.group = "m2".into();
    b.protocols = a.protocols.clone();
    let j = h.join(&b);
    assert_eq!(h.take_join(j).error, ErrorCode::COORDINATOR_NOT_AVAILABLE);
    // Once the first member leaves, there is room again.
    h.leave("m1", &[(a.member_id.as_str(), None)]);
    let j = h.join(&b);
    assert_eq!(h.take_join(j).error, ErrorCode::NONE);
}

// ----- durable state: persist, restore, unload ------------------------------------------------

/// Every persist event produced so far, in order.
fn persisted(h: &mut Harness) -> Vec<(String, Option<GroupSnapshot>)> {
    std::iter::from_fn(|| h.c.poll_persist()).collect()
}

/// A new coordinator (a new owner) at `h`'s clock, holding `snapshot` restored.
fn handed_over(h: &Harness, snapshot: GroupSnapshot) -> Harness {
    let mut next = Harness::with(h.c.config().clone());
    next.now = h.now;
    next.next_id = h.next_id + 1000;
    let blob = snapshot.encode();
    let decoded = GroupSnapshot::decode(&blob).expect("decodes");
    next.c.restore(next.now, decoded).expect("restores");
    assert!(next.c.poll_persist().is_none(), "restoring writes nothing");
    next
}

#[test]
fn a_stable_generation_is_persisted_once_settled() {
    let mut h = Harness::new();
    let mut cl = [Client::new("a"), Client::new("b")];
    let joins: Vec<RequestId> = cl.iter().map(|c| h.join(c)).collect();
    h.advance(2 * DELAY_MS);
    for (c, j) in cl.iter_mut().zip(&joins) {
        h.joined(c, *j);
    }
    assert!(persisted(&mut h).is_empty(), "a rebalance is not persisted");
    let [a, b] = &cl;
    let sb = h.sync(b, vec![]);
    assert!(persisted(&mut h).is_empty(), "nor a follower's sync");
    let sa = h.sync(
        a,
        vec![MemberAssignment {
            member_id: b.member_id.clone(),
            assignment: Bytes::from_static(b"p0"),
        }],
    );
    h.take_sync(sa);
    h.take_sync(sb);
    let events = persisted(&mut h);
    assert_eq!(events.len(), 1);
    let (group, Some(s)) = &events[0] else {
        panic!("a stored state: {events:?}");
    };
    assert_eq!(group, "g");
    assert_eq!(s.state, GroupState::Stable);
    assert_eq!(s.generation, 1);
    assert_eq!(s.leader.as_deref(), Some(a.member_id.as_str()));
    assert_eq!(s.protocol_name.as_deref(), Some("range"));
    let ids: Vec<&str> = s.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, vec![a.member_id.as_str(), b.member_id.as_str()]);
    let mb = &s.members[1];
    assert_eq!(mb.assignment, Bytes::from_static(b"p0"));
    assert_eq!(mb.protocols, vec![Protocol::new("range", "sub-b")]);
    assert_eq!(mb.session_timeout, Duration::from_millis(SESSION_MS));
    // Heartbeats change nothing durable.
    assert_eq!(h.heartbeat(a), ErrorCode::NONE);
    assert!(persisted(&mut h).is_empty());
    // Both leave: the rebalance empties the group, which is persisted (next generation).
    h.leave("g", &[(&a.member_id, None), (&b.member_id, None)]);
    let events = persisted(&mut h);
    let (_, Some(s)) = &events[0] else {
        panic!("a stored state: {events:?}");
    };
    assert_eq!((s.state, s.generation), (GroupState::Empty, 2));
    assert!(s.members.is_empty() && s.leader.is_none());
    // Deleting it deletes its durable state.
    h.c.delete("g").expect("an Empty group can be deleted");
    assert_eq!(persisted(&mut h), vec![("g".to_string(), None)]);
}

#[test]
fn a_restored_group_keeps_its_members_generation_and_assignments() {
    let mut h = Harness::new();
    let (mut a, mut b) = stable_pair(&mut h);
    let snapshot = h.c.snapshot("g").expect("a settled group");
    h.advance(SESSION_MS / 2);
    let mut n = handed_over(&h, snapshot);
    assert_eq!(n.state("g"), Some(GroupState::Stable));
    assert_eq!(n.c.generation("g"), Some(1));
    // Members keep heartbeating in their generation: no rebalance.
    n.advance(SESSION_MS - 1);
    assert_eq!(n.heartbeat(&a), ErrorCode::NONE);
    assert_eq!(n.heartbeat(&b), ErrorCode::NONE);
    // A follower's SyncGroup (a retry) gets its assignment back.
    let s = n.sync(&b, vec![]);
    assert_eq!(
        n.take_sync(s).assignment,
        Bytes::from(format!("for {}", b.member_id))
    );
    // A follower rejoining unchanged stays in the generation.
    let j = n.join(&b);
    assert_eq!(n.joined(&mut b, j).generation_id, 1);
    assert_eq!(n.state("g"), Some(GroupState::Stable));
    // The leader rejoining starts the next generation, continuing from the restored one.
    let ja = n.join(&a);
    assert_eq!(n.heartbeat(&b), ErrorCode::REBALANCE_IN_PROGRESS);
    let jb = n.join(&b);
    let ra = n.joined(&mut a, ja);
    let rb = n.joined(&mut b, jb);
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader, a.member_id);
    assert_eq!(
        ra.members.len(),
        2,
        "the leader sees both members' metadata"
    );
}

#[test]
fn restored_members_that_stay_silent_expire() {
    let mut h = Harness::new();
    let (a, _b) = stable_pair(&mut h);
    let snapshot = h.c.snapshot("g").expect("settled");
    let mut n = handed_over(&h, snapshot);
    // Only a heartbeats; b's session, restarted at the restore, runs out.
    for _ in 0..3 {
        n.advance(SESSION_MS / 2);
        n.heartbeat(&a);
    }
    assert_eq!(n.heartbeat(&a), ErrorCode::REBALANCE_IN_PROGRESS);
}

#[test]
fn an_unloaded_group_answers_its_parked_requests_and_writes_nothing() {
    let mut h = Harness::new();
    let (mut a, b) = stable_pair(&mut h);
    persisted(&mut h);
    let ja = h.join(&a);
    assert!(!h.answered(ja), "parked: b has not rejoined");
    let other = Client {
        group: "other".into(),
        ..Client::new("c")
    };
    h.join(&other);
    assert_eq!(
        h.c.unload(|g| g == "g", ErrorCode::NOT_COORDINATOR),
        1,
        "only the matching group"
    );
    assert_eq!(h.take_join(ja).error, ErrorCode::NOT_COORDINATOR);
    assert_eq!(h.state("g"), None);
    assert!(h.state("other").is_some());
    assert!(persisted(&mut h).is_empty());
    a.generation = 1;
    assert_eq!(h.heartbeat(&b), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn restores_are_held_to_the_caps() {
    let mut h = Harness::new();
    let (_a, _b) = stable_pair(&mut h);
    let snapshot = h.c.snapshot("g").expect("settled");
    // Already held.
    assert_eq!(
        h.c.restore(h.now, snapshot.clone()),
        Err(StateError::AlreadyHeld)
    );
    // Too many members for this coordinator.
    let mut small = Harness::with(GroupConfig {
        max_members_per_group: 1,
        ..GroupConfig::default()
    });
    assert_eq!(
        small.c.restore(small.now, snapshot.clone()),
        Err(StateError::OverCapacity("members per group"))
    );
    // Over the bytes held over all groups.
    let mut tight = Harness::with(GroupConfig {
        max_state_bytes: 300,
        ..GroupConfig::default()
    });
    assert_eq!(
        tight.c.restore(tight.now, snapshot.clone()),
        Err(StateError::OverCapacity("state bytes"))
    );
    // At max_groups: refused, and nothing is evicted to make room.
    let mut full = Harness::with(GroupConfig {
        max_groups: 1,
        ..GroupConfig::default()
    });
    let empty = GroupSnapshot {
        group_id: "e".into(),
        state: GroupState::Empty,
        generation: 2,
        protocol_type: Some("consumer".into()),
        protocol_name: None,
        leader: None,
        members: Vec::new(),
    };
    full.c.restore(full.now, empty).expect("room");
    let mut second = snapshot.clone();
    second.group_id = "g2".into();
    assert_eq!(
        full.c.restore(full.now, second),
        Err(StateError::OverCapacity("groups"))
    );
    assert_eq!(full.c.group_state("e"), Some(GroupState::Empty));
    assert!(
        persisted(&mut full).is_empty(),
        "nothing evicted or deleted"
    );
    // A leader that is not a member.
    let mut lost = snapshot;
    lost.group_id = "g3".into();
    lost.leader = Some("nobody".into());
    assert!(matches!(
        h.c.restore(h.now, lost),
        Err(StateError::Invalid(_))
    ));
    for c in [&small.c, &tight.c, &h.c] {
        assert!(c.group_state("g3").is_none());
    }
    assert!(small.c.list(&[]).is_empty() && tight.c.list(&[]).is_empty());
}

#[test]
fn a_static_member_replaced_without_a_rebalance_is_persisted() {
    let mut h = Harness::new();
    let mut cl = [Client::static_("a", "ia"), Client::new("b")];
    h.drive_to_stable(&mut cl);
    persisted(&mut h);
    let [a, _b] = &cl;
    let mut restarted = Client::static_("a", "ia");
    let j = h.join(&restarted);
    h.joined(&mut restarted, j);
    let events = persisted(&mut h);
    let (_, Some(s)) = &events[0] else {
        panic!("a stored state: {events:?}");
    };
    assert!(s.members.iter().any(|m| m.member_id == restarted.member_id));
    assert!(!s.members.iter().any(|m| m.member_id == a.member_id));
    // A new owner restoring it fences the old incarnation too.
    let mut n = handed_over(&h, s.clone());
    assert_eq!(n.heartbeat(a), ErrorCode::FENCED_INSTANCE_ID);
    assert_eq!(n.heartbeat(&restarted), ErrorCode::NONE);
}
