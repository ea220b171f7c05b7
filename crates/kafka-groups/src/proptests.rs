//! Random conversations: clients that mostly follow the protocol (and sometimes do not),
//! random time advances, and invariants checked after every step.
//!
//! Checked: no panic; the coordinator's internal consistency (`check_invariants`: one
//! leader and it is a member, every settled member in the group's generation, timers in
//! step with their owners, every cap held); every successful JoinGroup answer of one group
//! generation that names its recipient as leader names the same one; `poll_timeout` is never in the past after
//! `handle_timeout`; every request is answered exactly once, by the time the clock has run
//! far enough for every deadline to pass.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ErrorCode;
use proptest::prelude::*;

use crate::types::*;
use crate::{Coordinator, GroupSnapshot};

const GROUPS: [&str; 3] = ["g0", "g1", "g2"];
const CLIENTS: usize = 7;

#[derive(Clone, Debug)]
enum Op {
    Join {
        client: usize,
        fresh: bool,
        protocols: u8,
        require_known: bool,
    },
    Sync {
        client: usize,
        stale: bool,
    },
    Heartbeat {
        client: usize,
        stale: bool,
    },
    Leave {
        clients: Vec<usize>,
        by_instance: bool,
    },
    Commit {
        client: usize,
        simple: bool,
    },
    Delete {
        group: usize,
    },
    Advance(u64),
    /// The groups move to a fresh coordinator that restores their durable states.
    Handover,
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0..CLIENTS;
    prop_oneof![
        4 => (client.clone(), any::<bool>(), 0..4u8, any::<bool>()).prop_map(
            |(client, fresh, protocols, require_known)| Op::Join { client, fresh, protocols, require_known }
        ),
        4 => (client.clone(), prop::bool::weighted(0.1)).prop_map(|(client, stale)| Op::Sync { client, stale }),
        3 => (client.clone(), prop::bool::weighted(0.1)).prop_map(|(client, stale)| Op::Heartbeat { client, stale }),
        1 => (prop::collection::vec(client.clone(), 1..3), any::<bool>())
            .prop_map(|(clients, by_instance)| Op::Leave { clients, by_instance }),
        1 => (client, any::<bool>()).prop_map(|(client, simple)| Op::Commit { client, simple }),
        1 => (0..GROUPS.len()).prop_map(|group| Op::Delete { group }),
        4 => prop_oneof![4 => 0..3_000u64, 1 => 0..40_000u64].prop_map(Op::Advance),
        1 => Just(Op::Handover),
    ]
}

/// What one consumer process knows about itself.
#[derive(Clone, Debug, Default)]
struct ClientState {
    member_id: String,
    generation: i32,
    /// From its latest JoinGroup answer, if it was the leader: who to assign to.
    members: Vec<String>,
}

struct World {
    c: Coordinator,
    now: Millis,
    next_id: u64,
    clients: Vec<ClientState>,
    /// Unanswered requests and who sent them.
    outstanding: HashMap<RequestId, usize>,
    /// (group, generation) -> the one member told it leads that generation. (Followers may
    /// see a different leader id within a generation: a static leader replaced without a
    /// rebalance is named by its old id to the new incarnation, by its new id afterwards.)
    leaders: HashMap<(String, i32), String>,
    /// The durable states written so far, as a store keeps them (last write wins).
    store: std::collections::BTreeMap<String, Bytes>,
}

fn group_of(client: usize) -> &'static str {
    GROUPS[client % GROUPS.len()]
}

/// The last two clients are static members.
fn instance_of(client: usize) -> Option<String> {
    (client >= CLIENTS - 2).then(|| format!("inst-{client}"))
}

fn protocols(which: u8, client: usize) -> Vec<Protocol> {
    let meta = Bytes::from(format!("m{client}-{which}"));
    let names: &[&str] = match which {
        0 => &["range"],
        1 => &["range", "roundrobin"],
        2 => &["roundrobin", "range"],
        _ => &["sticky"],
    };
    names
        .iter()
        .map(|n| Protocol::new(*n, meta.clone()))
        .collect()
}

impl World {
    fn new() -> Self {
        let config = GroupConfig {
            max_groups: 2,
            max_members_per_group: 3,
            max_pending_members_per_group: 2,
            ..GroupConfig::default()
        };
        Self {
            c: Coordinator::new(config),
            now: Millis(0),
            next_id: 0,
            clients: vec![ClientState::default(); CLIENTS],
            outstanding: HashMap::new(),
            leaders: HashMap::new(),
            store: std::collections::BTreeMap::new(),
        }
    }

    fn request(&mut self, client: usize) -> RequestId {
        self.next_id += 1;
        let id = RequestId(self.next_id);
        self.outstanding.insert(id, client);
        id
    }

    fn apply(&mut self, op: Op) {
        let now = self.now;
        match op {
            Op::Join {
                client,
                fresh,
                protocols: which,
                require_known,
            } => {
                if fresh {
                    self.clients[client].member_id.clear();
                }
                let id = self.request(client);
                let req = JoinGroup {
                    group_id: group_of(client).into(),
                    member_id: self.clients[client].member_id.clone(),
                    group_instance_id: instance_of(client),
                    session_timeout: Duration::from_millis(6_000 + 2_000 * client as u64),
                    rebalance_timeout: Duration::from_millis(1_000 + 5_000 * client as u64),
                    protocol_type: "consumer".into(),
                    protocols: protocols(which, client),
                    client_id: format!("c{client}"),
                    client_host: "/127.0.0.1".into(),
                    reason: None,
                    require_known_member_id: require_known,
                };
                self.c.join(now, id, req);
            }
            Op::Sync { client, stale } => {
                let id = self.request(client);
                let state = &self.clients[client];
                let assignments = state
                    .members
                    .iter()
                    .map(|m| MemberAssignment {
                        member_id: m.clone(),
                        assignment: Bytes::from(format!("a-{m}")),
                    })
                    .collect();
                let req = SyncGroup {
                    group_id: group_of(client).into(),
                    generation_id: state.generation - i32::from(stale),
                    member_id: state.member_id.clone(),
                    group_instance_id: instance_of(client),
                    protocol_type: Some("consumer".into()),
                    protocol_name: None,
                    assignments,
                };
                self.c.sync(now, id, req);
            }
            Op::Heartbeat { client, stale } => {
                let id = self.request(client);
                let state = &self.clients[client];
                let req = Heartbeat {
                    group_id: group_of(client).into(),
                    generation_id: state.generation - i32::from(stale),
                    member_id: state.member_id.clone(),
                    group_instance_id: instance_of(client),
                };
                self.c.heartbeat(now, id, req);
            }
            Op::Leave {
                clients,
                by_instance,
            } => {
                let id = self.request(clients[0]);
                let group = group_of(clients[0]);
                let members = clients
                    .iter()
                    .map(|&c| LeavingMember {
                        member_id: if by_instance && instance_of(c).is_some() {
                            String::new()
                        } else {
                            self.clients[c].member_id.clone()
                        },
                        group_instance_id: instance_of(c),
                    })
                    .collect();
                self.c.leave(
                    now,
                    id,
                    LeaveGroup {
                        group_id: group.into(),
                        members,
                    },
                );
            }
            Op::Commit { client, simple } => {
                let state = self.clients[client].clone();
                let result = if simple {
                    self.c.validate_commit(now, group_of(client), -1, "", None)
                } else {
                    self.c.validate_commit(
                        now,
                        group_of(client),
                        state.generation,
                        &state.member_id,
                        instance_of(client).as_deref(),
                    )
                };
                if let Err(e) = result {
                    assert_ne!(e, ErrorCode::NONE);
                }
            }
            Op::Delete { group } => {
                if self.c.delete(GROUPS[group]).is_ok() {
                    assert_eq!(self.c.group_state(GROUPS[group]), None);
                }
            }
            Op::Advance(ms) => {
                let target = Millis(self.now.0 + ms);
                self.run_until(target);
            }
            Op::Handover => self.handover(),
        }
        self.collect();
    }

    /// Fires deadlines up to `target`, as a driver would.
    fn run_until(&mut self, target: Millis) {
        let mut rounds = 0;
        while let Some(at) = self.c.poll_timeout() {
            if at > target {
                break;
            }
            rounds += 1;
            assert!(rounds < 10_000, "timeouts do not settle");
            self.now = self.now.max(at);
            self.c.handle_timeout(self.now);
            if let Some(next) = self.c.poll_timeout() {
                assert!(
                    next >= self.now,
                    "deadline in the past after handle_timeout"
                );
            }
            self.collect();
        }
        self.now = self.now.max(target);
    }

    /// Moves every group to a new coordinator, as a new owner of their shard would: the
    /// old one unloads them (its parked requests answered `NOT_COORDINATOR`), the new one
    /// restores what was written. Clients keep their member ids and generations.
    fn handover(&mut self) {
        self.collect();
        self.c.unload(|_| true, ErrorCode::NOT_COORDINATOR);
        assert!(self.c.poll_persist().is_none(), "unloading writes nothing");
        self.collect();
        assert!(self.c.list(&[]).is_empty());
        let mut next = Coordinator::new(self.c.config().clone());
        for (group, blob) in &self.store {
            let snapshot = GroupSnapshot::decode(blob).expect("a written state decodes");
            let generation = snapshot.generation;
            let state = snapshot.state;
            next.restore(self.now, snapshot)
                .expect("a written state restores");
            assert_eq!(next.generation(group), Some(generation));
            assert_eq!(next.group_state(group), Some(state));
        }
        assert!(next.poll_persist().is_none(), "restoring writes nothing");
        self.c = next;
        // Generations not yet written are handed out again by the new coordinator.
        self.leaders.clear();
        self.collect();
    }

    fn collect(&mut self) {
        while let Some((group, state)) = self.c.poll_persist() {
            match state {
                Some(s) => {
                    assert_eq!(s.group_id, group);
                    assert!(matches!(s.state, GroupState::Stable | GroupState::Empty));
                    let blob = s.encode();
                    assert_eq!(GroupSnapshot::decode(&blob).as_ref(), Ok(&s));
                    self.store.insert(group, blob);
                }
                None => {
                    self.store.remove(&group);
                }
            }
        }
        while let Some((id, response)) = self.c.poll_response() {
            let client = self
                .outstanding
                .remove(&id)
                .unwrap_or_else(|| panic!("{id:?} answered twice or never asked"));
            if let Response::Join(r) = response {
                self.on_join(client, r);
            }
        }
        // Group ids are reused after a delete or an eviction, and generations restart.
        let leaders = std::mem::take(&mut self.leaders);
        self.leaders = leaders
            .into_iter()
            .filter(|((g, _), _)| self.c.group_state(g).is_some())
            .collect();
        if let Err(e) = self.c.check_invariants() {
            panic!("invariant violated at {:?}: {e}", self.now);
        }
    }

    fn on_join(&mut self, client: usize, r: JoinResponse) {
        let state = &mut self.clients[client];
        match r.error {
            ErrorCode::NONE => {
                assert!(r.generation_id > 0);
                state.member_id = r.member_id.clone();
                state.generation = r.generation_id;
                state.members = r.members.iter().map(|m| m.member_id.clone()).collect();
                if r.leader == r.member_id {
                    assert!(!r.members.is_empty(), "the leader sees the members");
                } else {
                    assert!(r.members.is_empty(), "only the leader sees the members");
                }
                if r.leader == r.member_id {
                    let key = (group_of(client).to_owned(), r.generation_id);
                    let leader = self.leaders.entry(key).or_insert_with(|| r.leader.clone());
                    assert_eq!(*leader, r.leader, "two leaders in one generation");
                }
            }
            ErrorCode::MEMBER_ID_REQUIRED => state.member_id = r.member_id,
            ErrorCode::UNKNOWN_MEMBER_ID => state.member_id.clear(),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_conversations_keep_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for op in ops {
            w.apply(op);
        }
        // Far enough for every deadline to pass: every parked request must be answered.
        let far = Millis(w.now.0 + 24 * 3_600 * 1_000);
        w.run_until(far);
        prop_assert!(w.outstanding.is_empty(), "unanswered: {:?}", w.outstanding);
        prop_assert_eq!(w.c.poll_timeout(), None);
        for g in w.c.list(&[]) {
            prop_assert_eq!(g.state, GroupState::Empty);
        }
    }
}
