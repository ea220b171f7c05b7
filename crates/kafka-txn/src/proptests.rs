//! Property tests: random request sequences, with writes and marker jobs finishing (or
//! failing) in random order, shards moving, and the clock advancing.

use std::collections::{BTreeMap, HashMap, HashSet};

use kafka_protocol::ErrorCode as E;
use proptest::prelude::*;

use crate::tests::{shard_of, tp};
use crate::{
    AddPartitions, Effect, EndTxn, InitProducerId, JobId, Reply, RequestId, TxnConfig,
    TxnCoordinator, TxnMetadata, WriteId,
};

const IDS: [&str; 4] = ["a", "b", "c", "xd"];

#[derive(Debug, Clone)]
enum Op {
    Init {
        id: usize,
        expected: u8,
        v3: bool,
    },
    Add {
        id: usize,
        epoch_delta: i16,
        wrong_pid: bool,
        parts: u8,
    },
    End {
        id: usize,
        epoch_delta: i16,
        commit: bool,
    },
    Verify {
        id: usize,
        epoch_delta: i16,
        part: u8,
    },
    Written {
        pick: usize,
        ok: bool,
    },
    MarkersDone {
        pick: usize,
    },
    Tick {
        advance: i64,
    },
    Move {
        shard: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..IDS.len();
    let delta = prop_oneof![3 => Just(0i16), 1 => Just(-1i16), 1 => Just(1i16)];
    prop_oneof![
        3 => (id.clone(), 0u8..3, any::<bool>()).prop_map(|(id, expected, v3)| Op::Init { id, expected, v3 }),
        4 => (id.clone(), delta.clone(), prop::bool::weighted(0.1), 1u8..16)
            .prop_map(|(id, epoch_delta, wrong_pid, parts)| Op::Add { id, epoch_delta, wrong_pid, parts }),
        3 => (id.clone(), delta.clone(), any::<bool>())
            .prop_map(|(id, epoch_delta, commit)| Op::End { id, epoch_delta, commit }),
        2 => (id, delta, 0u8..4).prop_map(|(id, epoch_delta, part)| Op::Verify { id, epoch_delta, part }),
        6 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(pick, ok)| Op::Written { pick, ok }),
        3 => any::<usize>().prop_map(|pick| Op::MarkersDone { pick }),
        2 => prop_oneof![Just(1i64), Just(500), Just(5_000), Just(40_000)].prop_map(|advance| Op::Tick { advance }),
        1 => (0u32..2).prop_map(|shard| Op::Move { shard }),
    ]
}

/// The driver and the store, and what the properties need to remember.
struct World {
    c: TxnCoordinator,
    now: i64,
    next_request: u64,
    next_pid: i64,
    /// Writes in flight: id and state.
    writes: Vec<(WriteId, String, Option<TxnMetadata>)>,
    jobs: Vec<JobId>,
    /// What the store holds.
    store: BTreeMap<String, TxnMetadata>,
    epochs: u32,
    /// Requests waiting for an answer: (id, pid, epoch) for Add/End, None for Init.
    waiting: HashMap<RequestId, (String, Option<(i64, i16)>)>,
    answered: HashSet<RequestId>,
    /// Per id, the (pid, highest epoch) durable, reset when the id is deleted.
    highest: HashMap<String, (i64, i16)>,
}

impl World {
    fn new() -> World {
        let config = TxnConfig {
            max_timeout_ms: 10_000,
            id_expiration_ms: 60_000,
            abort_check_interval_ms: 1_000,
            max_partitions_per_txn: 3,
            max_transactional_ids: 3,
            max_open_txns: 2,
        };
        let mut w = World {
            c: TxnCoordinator::new(config, shard_of),
            now: 0,
            next_request: 0,
            next_pid: 100,
            writes: Vec::new(),
            jobs: Vec::new(),
            store: BTreeMap::new(),
            epochs: 0,
            waiting: HashMap::new(),
            answered: HashSet::new(),
            highest: HashMap::new(),
        };
        let fx = w.c.load(0, 0, 0, Vec::new());
        w.apply(fx).ok();
        let fx = w.c.load(0, 1, 0, Vec::new());
        w.apply(fx).ok();
        w
    }

    fn request(&mut self, id: &str, producer: Option<(i64, i16)>) -> RequestId {
        self.next_request += 1;
        let r = RequestId(self.next_request);
        self.waiting.insert(r, (id.to_owned(), producer));
        r
    }

    /// The durable state's pid/epoch, or something made up.
    fn producer(&self, id: &str) -> (i64, i16) {
        self.c
            .describe(id)
            .map_or((7, 0), |m| (m.producer_id, m.producer_epoch))
    }

    fn apply(&mut self, effects: Vec<Effect>) -> Result<(), TestCaseError> {
        for e in effects {
            match e {
                Effect::Reply { request, reply } => {
                    prop_assert!(self.answered.insert(request), "answered twice");
                    let (id, producer) = self
                        .waiting
                        .remove(&request)
                        .ok_or_else(|| TestCaseError::fail("reply to nobody"))?;
                    if let (Some((pid, epoch)), Reply::Code(E::NONE)) = (producer, &reply) {
                        // NONE only for the current producer and epoch.
                        let m = self.c.describe(&id).map_err(|c| {
                            TestCaseError::fail(format!("NONE for {id} without a state: {c:?}"))
                        })?;
                        prop_assert_eq!((m.producer_id, m.producer_epoch), (pid, epoch));
                    }
                    if let Reply::ProducerId(Ok((pid, epoch))) = reply {
                        let m = self
                            .c
                            .describe(&id)
                            .map_err(|_| TestCaseError::fail("handed out without a state"))?;
                        prop_assert_eq!((m.producer_id, m.producer_epoch), (pid, epoch));
                    }
                }
                Effect::Persist {
                    write,
                    transactional_id,
                    state,
                } => {
                    prop_assert!(
                        !self.writes.iter().any(|w| w.1 == transactional_id),
                        "two writes in flight for {}",
                        transactional_id
                    );
                    self.writes.push((write, transactional_id, state));
                }
                Effect::WriteMarkers(job) => {
                    let m = self
                        .c
                        .describe(&job.transactional_id)
                        .map_err(|_| TestCaseError::fail("markers without a state"))?;
                    prop_assert_eq!(
                        (m.producer_id, m.producer_epoch),
                        (job.producer_id, job.producer_epoch)
                    );
                    self.jobs.push(job.job);
                }
                Effect::CancelMarkers(job) => {
                    prop_assert!(self.jobs.contains(&job));
                    self.jobs.retain(|j| *j != job);
                }
            }
        }
        Ok(())
    }

    fn durable(&mut self, id: &str, state: Option<&TxnMetadata>) -> Result<(), TestCaseError> {
        match state {
            None => {
                self.store.remove(id);
                self.highest.remove(id);
            }
            Some(m) => {
                self.store.insert(id.to_owned(), m.clone());
                if let Some((pid, epoch)) = self.highest.get(id).copied()
                    && pid == m.producer_id
                {
                    prop_assert!(m.producer_epoch >= epoch, "epoch went back for {}", id);
                }
                self.highest
                    .insert(id.to_owned(), (m.producer_id, m.producer_epoch));
            }
        }
        Ok(())
    }

    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Init { id, expected, v3 } => {
                let id = IDS[id];
                let (pid, epoch) = self.producer(id);
                let expected = match (expected, v3) {
                    (_, false) | (0, _) => None,
                    (1, _) => Some((pid, epoch)),
                    _ => Some((pid, epoch.saturating_sub(1))),
                };
                let request = self.request(id, None);
                self.next_pid += 1;
                let req = InitProducerId {
                    request,
                    transactional_id: id.to_owned(),
                    timeout_ms: 3_000,
                    expected,
                    version: if v3 { 5 } else { 1 },
                    fresh_producer_id: self.next_pid,
                };
                let fx = self.c.init_producer_id(self.now, req);
                self.apply(fx)?;
            }
            Op::Add {
                id,
                epoch_delta,
                wrong_pid,
                parts,
            } => {
                let id = IDS[id];
                let (pid, epoch) = self.producer(id);
                let pid = if wrong_pid { pid + 1 } else { pid };
                let epoch = epoch.saturating_add(epoch_delta);
                let partitions = (0..4)
                    .filter(|p| parts & (1 << p) != 0)
                    .map(|p| tp("t", p))
                    .collect();
                let request = self.request(id, Some((pid, epoch)));
                let req = AddPartitions {
                    request,
                    transactional_id: id.to_owned(),
                    producer_id: pid,
                    producer_epoch: epoch,
                    partitions,
                    version: 3,
                };
                let fx = self.c.add_partitions(self.now, req);
                self.apply(fx)?;
            }
            Op::End {
                id,
                epoch_delta,
                commit,
            } => {
                let id = IDS[id];
                let (pid, epoch) = self.producer(id);
                let epoch = epoch.saturating_add(epoch_delta);
                let request = self.request(id, Some((pid, epoch)));
                let req = EndTxn {
                    request,
                    transactional_id: id.to_owned(),
                    producer_id: pid,
                    producer_epoch: epoch,
                    commit,
                    version: 3,
                };
                let fx = self.c.end_txn(self.now, req);
                self.apply(fx)?;
            }
            Op::Verify {
                id,
                epoch_delta,
                part,
            } => {
                let id = IDS[id];
                let known = self.c.describe(id).is_ok();
                let (pid, epoch) = self.producer(id);
                let asked = epoch.saturating_add(epoch_delta);
                let code = self.c.verify(id, pid, asked, &tp("t", i32::from(part)));
                if code == E::NONE {
                    prop_assert!(known);
                    prop_assert_eq!(asked, epoch);
                }
                if known && asked < epoch {
                    prop_assert_eq!(code, E::PRODUCER_FENCED);
                }
            }
            Op::Written { pick, ok } => {
                if !self.writes.is_empty() {
                    let (write, id, state) = self.writes.remove(pick % self.writes.len());
                    let retried = state.as_ref().is_none_or(|m| {
                        matches!(
                            m.state,
                            crate::TxnState::CompleteCommit | crate::TxnState::CompleteAbort
                        )
                    });
                    if ok {
                        self.durable(&id, state.as_ref())?;
                    } else if retried {
                        // Still pending: the driver would retry it.
                        self.writes.push((write, id.clone(), state.clone()));
                    }
                    let fx = self.c.written(self.now, write, ok);
                    self.apply(fx)?;
                }
            }
            Op::MarkersDone { pick } => {
                if !self.jobs.is_empty() {
                    let job = self.jobs.remove(pick % self.jobs.len());
                    let fx = self.c.markers_done(self.now, job);
                    self.apply(fx)?;
                }
            }
            Op::Tick { advance } => {
                self.now += advance;
                let fx = self.c.tick(self.now);
                self.apply(fx)?;
            }
            Op::Move { shard } => {
                let fx = self.c.unload(shard);
                self.apply(fx)?;
                // Writes of the old owner are lost in the move.
                self.writes.retain(|w| shard_of(&w.1) != shard);
                self.epochs += 1;
                let states = self
                    .store
                    .values()
                    .filter(|m| shard_of(&m.transactional_id) == shard)
                    .cloned()
                    .collect();
                let fx = self.c.load(self.now, shard, self.epochs as i32, states);
                self.apply(fx)?;
            }
        }
        prop_assert!(self.c.job_count() == self.jobs.len());
        Ok(())
    }

    /// Lets every write succeed and every job finish.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..100 {
            if self.writes.is_empty() && self.jobs.is_empty() {
                return Ok(());
            }
            self.step(Op::Written { pick: 0, ok: true })?;
            self.step(Op::MarkersDone { pick: 0 })?;
        }
        Err(TestCaseError::fail("never settles"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_sequences_keep_the_invariants(ops in prop::collection::vec(op(), 1..80)) {
        let mut w = World::new();
        for op in ops {
            w.step(op)?;
        }
        w.drain()?;
        // Every request was answered exactly once.
        prop_assert!(w.waiting.is_empty(), "unanswered: {:?}", w.waiting);
        // Durable states are what the store holds.
        for (id, m) in &w.store {
            prop_assert_eq!(w.c.describe(id).ok(), Some(m));
        }
        prop_assert_eq!(w.c.id_count(), w.store.len());
        let open = w.store.values().filter(|m| matches!(m.state,
            crate::TxnState::Ongoing | crate::TxnState::PrepareCommit | crate::TxnState::PrepareAbort)).count();
        prop_assert_eq!(w.c.open_count(), open);
    }
}
