//! Table tests of the transitions and their error codes, with a fake clock.

use std::collections::BTreeSet;

use kafka_protocol::ErrorCode as E;

use crate::{
    AddPartitions, Effect, EndTxn, InitProducerId, Millis, OFFSETS_TOPIC, Reply, RequestId,
    TopicPartition, TxnConfig, TxnCoordinator, TxnMetadata, TxnState, WriteId, snapshot,
};

/// Ids starting with `x` live in shard 1, the others in shard 0.
pub(crate) fn shard_of(id: &str) -> u32 {
    u32::from(id.starts_with('x'))
}

pub(crate) fn tp(t: &str, p: i32) -> TopicPartition {
    (t.to_owned(), p)
}

/// A coordinator with shard 0 loaded, and a driver that carries out effects on request.
pub(crate) struct H {
    pub(crate) c: TxnCoordinator,
    pub(crate) now: Millis,
    next_request: u64,
    next_pid: i64,
}

impl H {
    pub(crate) fn with(config: TxnConfig) -> H {
        let mut c = TxnCoordinator::new(config, shard_of);
        assert!(c.load(0, 0, 7, Vec::new()).is_empty());
        H {
            c,
            now: 1_000,
            next_request: 0,
            next_pid: 1000,
        }
    }

    pub(crate) fn new() -> H {
        H::with(TxnConfig::default())
    }

    fn request(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    pub(crate) fn init_req(
        &mut self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        version: i16,
    ) -> InitProducerId {
        self.next_pid += 1;
        InitProducerId {
            request: self.request(),
            transactional_id: id.to_owned(),
            timeout_ms,
            expected,
            version,
            fresh_producer_id: self.next_pid,
        }
    }

    pub(crate) fn add_req(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        tps: &[TopicPartition],
        version: i16,
    ) -> AddPartitions {
        AddPartitions {
            request: self.request(),
            transactional_id: id.to_owned(),
            producer_id: pid,
            producer_epoch: epoch,
            partitions: tps.to_vec(),
            version,
        }
    }

    pub(crate) fn end_req(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
        version: i16,
    ) -> EndTxn {
        EndTxn {
            request: self.request(),
            transactional_id: id.to_owned(),
            producer_id: pid,
            producer_epoch: epoch,
            commit,
            version,
        }
    }

    /// Carries out `effects` until nothing is left (writes succeed, markers are written);
    /// returns the replies.
    pub(crate) fn settle(&mut self, mut effects: Vec<Effect>) -> Vec<(RequestId, Reply)> {
        let mut replies = Vec::new();
        while !effects.is_empty() {
            let mut next = Vec::new();
            for e in effects {
                match e {
                    Effect::Reply { request, reply } => replies.push((request, reply)),
                    Effect::Persist { write, .. } => {
                        next.extend(self.c.written(self.now, write, true));
                    }
                    Effect::WriteMarkers(job) => {
                        next.extend(self.c.markers_done(self.now, job.job));
                    }
                    Effect::CancelMarkers(_) => {}
                }
            }
            effects = next;
        }
        replies
    }

    /// Fails the one write of `effects`: the reply.
    pub(crate) fn fail(&mut self, effects: Vec<Effect>) -> Reply {
        let p = persists(&effects);
        assert_eq!(p.len(), 1, "{effects:?}");
        let fx = self.c.written(self.now, p[0].0, false);
        self.reply(fx)
    }

    /// The one reply of settling `effects`.
    pub(crate) fn reply(&mut self, effects: Vec<Effect>) -> Reply {
        let replies = self.settle(effects);
        assert_eq!(replies.len(), 1, "{replies:?}");
        replies[0].1.clone()
    }

    pub(crate) fn init(
        &mut self,
        id: &str,
        expected: Option<(i64, i16)>,
        version: i16,
    ) -> Result<(i64, i16), E> {
        let req = self.init_req(id, 60_000, expected, version);
        let fx = self.c.init_producer_id(self.now, req);
        match self.reply(fx) {
            Reply::ProducerId(r) => r,
            other => panic!("{other:?}"),
        }
    }

    pub(crate) fn add(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        tps: &[TopicPartition],
        version: i16,
    ) -> E {
        let req = self.add_req(id, pid, epoch, tps, version);
        let fx = self.c.add_partitions(self.now, req);
        code(self.reply(fx))
    }

    pub(crate) fn end(&mut self, id: &str, pid: i64, epoch: i16, commit: bool, version: i16) -> E {
        let req = self.end_req(id, pid, epoch, commit, version);
        let fx = self.c.end_txn(self.now, req);
        code(self.reply(fx))
    }

    pub(crate) fn state(&self, id: &str) -> TxnMetadata {
        self.c.describe(id).cloned().expect("described")
    }
}

pub(crate) fn code(r: Reply) -> E {
    match r {
        Reply::Code(c) => c,
        other => panic!("{other:?}"),
    }
}

fn persists(effects: &[Effect]) -> Vec<(WriteId, Option<TxnMetadata>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist { write, state, .. } => Some((*write, state.clone())),
            _ => None,
        })
        .collect()
}

fn jobs(effects: &[Effect]) -> Vec<crate::MarkerJob> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::WriteMarkers(j) => Some(j.clone()),
            _ => None,
        })
        .collect()
}

fn replies(effects: &[Effect]) -> Vec<(RequestId, Reply)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reply { request, reply } => Some((*request, reply.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn state_names_round_trip() {
    for s in TxnState::ALL {
        assert_eq!(TxnState::parse(s.name()), Some(s));
    }
    assert_eq!(TxnState::PrepareCommit.name(), "PrepareCommit");
    assert_eq!(TxnState::parse("ongoing"), None);
    assert_eq!(TxnState::parse("PrepareEpochFence"), None);
}

#[test]
fn init_producer_id_codes() {
    let mut h = H::new();
    // (id, timeout, expected, version) -> code
    type Case<'a> = (&'a str, i32, Option<(i64, i16)>, i16, E);
    let cases: Vec<Case<'_>> = vec![
        ("", 1000, None, 5, E::INVALID_REQUEST),
        ("a", 0, None, 5, E::INVALID_TRANSACTION_TIMEOUT),
        ("a", -5, None, 5, E::INVALID_TRANSACTION_TIMEOUT),
        ("a", 900_001, None, 5, E::INVALID_TRANSACTION_TIMEOUT),
        ("xa", 1000, None, 5, E::NOT_COORDINATOR),
    ];
    for (id, timeout, expected, version, want) in cases {
        let req = h.init_req(id, timeout, expected, version);
        let fx = h.c.init_producer_id(h.now, req);
        assert_eq!(
            h.reply(fx),
            Reply::ProducerId(Err(want)),
            "{id} {timeout} {expected:?}"
        );
    }
    assert_eq!(h.c.id_count(), 0);
    // The largest timeout is accepted.
    let req = h.init_req("a", 900_000, None, 5);
    let pid = req.fresh_producer_id;
    let fx = h.c.init_producer_id(h.now, req);
    assert_eq!(h.reply(fx), Reply::ProducerId(Ok((pid, 0))));
    // Each further call bumps the epoch and keeps the producer id.
    assert_eq!(h.init("a", None, 5), Ok((pid, 1)));
    assert_eq!(h.init("a", None, 2), Ok((pid, 2)));
    let m = h.state("a");
    assert_eq!(
        (m.state, m.last_producer_epoch, m.timeout_ms),
        (TxnState::Empty, -1, 60_000)
    );
}

#[test]
fn init_producer_id_expected_pid_and_epoch() {
    let mut h = H::new();
    let (pid, e0) = h.init("a", None, 5).expect("pid");
    // v3+: resuming with the current pid/epoch bumps and remembers the last epoch.
    assert_eq!(h.init("a", Some((pid, e0)), 5), Ok((pid, e0 + 1)));
    assert_eq!(h.state("a").last_producer_epoch, e0);
    // The retry of that call (answer lost) gets the same epoch again.
    assert_eq!(h.init("a", Some((pid, e0)), 5), Ok((pid, e0 + 1)));
    // Another pid is fenced: PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH below.
    assert_eq!(h.init("a", Some((pid + 1, 0)), 5), Err(E::PRODUCER_FENCED));
    assert_eq!(h.init("a", Some((pid + 1, 0)), 4), Err(E::PRODUCER_FENCED));
    assert_eq!(
        h.init("a", Some((pid + 1, 0)), 3),
        Err(E::INVALID_PRODUCER_EPOCH)
    );
    // A new producer (no expected) bumps and forgets the last epoch...
    assert_eq!(h.init("a", None, 5), Ok((pid, e0 + 2)));
    // ... so the older producer, once bumped, is fenced.
    assert_eq!(h.init("a", Some((pid, e0 + 1)), 5), Err(E::PRODUCER_FENCED));
    assert_eq!(
        h.init("a", Some((pid, e0)), 3),
        Err(E::INVALID_PRODUCER_EPOCH)
    );
    // An unknown id with an expected pair gets a new producer id anyway.
    let r = h.init("b", Some((77, 3)), 5).expect("new");
    assert_eq!(r.1, 0);
    assert_ne!(r.0, pid);
}

#[test]
fn init_producer_id_epoch_exhaustion() {
    let mut h = H::new();
    let (pid, _) = h.init("a", None, 5).expect("pid");
    let mut m = h.state("a");
    m.producer_epoch = i16::MAX - 2;
    h.c.load(h.now, 0, 8, vec![m]);
    // The bump reaches the exhausted epoch...
    assert_eq!(h.init("a", None, 5), Ok((pid, i16::MAX - 1)));
    // ... and the next call gets a new producer id, remembering the old pair (v3+).
    let (pid2, e) = h.init("a", Some((pid, i16::MAX - 1)), 5).expect("rotated");
    assert_ne!(pid2, pid);
    assert_eq!(e, 0);
    let m = h.state("a");
    assert_eq!(
        (m.last_producer_id, m.last_producer_epoch),
        (pid, i16::MAX - 1)
    );
    // Its retry (old pid, exhausted epoch) gets the same new pid and epoch.
    assert_eq!(h.init("a", Some((pid, i16::MAX - 1)), 5), Ok((pid2, 0)));
    // Without an expected pair the rotation forgets the last epoch.
    let mut m = h.state("a");
    m.producer_epoch = i16::MAX - 1;
    h.c.load(h.now, 0, 9, vec![m]);
    let (pid3, e) = h.init("a", None, 5).expect("rotated");
    assert_ne!(pid3, pid2);
    assert_eq!(e, 0);
    assert_eq!(h.state("a").last_producer_epoch, -1);
    // An exhausted epoch with an expected epoch that is neither current nor last: fenced.
    let mut m = h.state("a");
    m.producer_epoch = i16::MAX - 1;
    m.last_producer_epoch = 5;
    h.c.load(h.now, 0, 10, vec![m]);
    assert_eq!(h.init("a", Some((pid3, 3)), 5), Err(E::PRODUCER_FENCED));
    assert_eq!(h.init("a", Some((pid3, 5)), 5), Ok((pid3, i16::MAX - 1)));
}

#[test]
fn init_producer_id_fences_an_ongoing_transaction() {
    let mut h = H::new();
    let (pid, e) = h.init("a", None, 5).expect("pid");
    assert_eq!(h.add("a", pid, e, &[tp("t", 0), tp("t", 1)], 3), E::NONE);
    // Another producer id (v3+) is refused before anything is fenced.
    let req = h.init_req("a", 60_000, Some((pid + 9, 0)), 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert_eq!(fx.len(), 1);
    assert_eq!(h.reply(fx), Reply::ProducerId(Err(E::PRODUCER_FENCED)));
    assert_eq!(h.state("a").state, TxnState::Ongoing);
    let req = h.init_req("a", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    let target = p[0].1.clone().expect("state");
    assert_eq!(
        (target.state, target.producer_epoch),
        (TxnState::PrepareAbort, e + 1)
    );
    // Nothing answered before the write; then CONCURRENT_TRANSACTIONS and the markers.
    assert!(replies(&fx).is_empty());
    let fx = h.c.written(h.now, p[0].0, true);
    assert_eq!(
        replies(&fx).into_iter().map(|r| r.1).collect::<Vec<_>>(),
        vec![Reply::ProducerId(Err(E::CONCURRENT_TRANSACTIONS))]
    );
    let j = jobs(&fx);
    assert_eq!(j.len(), 1);
    assert_eq!(
        (
            j[0].producer_id,
            j[0].producer_epoch,
            j[0].commit,
            j[0].coordinator_epoch
        ),
        (pid, e + 1, false, 7)
    );
    assert_eq!(j[0].partitions, vec![tp("t", 0), tp("t", 1)]);
    // While the markers run: the retry waits; the old producer is fenced.
    assert_eq!(h.init("a", None, 5), Err(E::CONCURRENT_TRANSACTIONS));
    assert_eq!(h.end("a", pid, e, true, 3), E::PRODUCER_FENCED);
    assert_eq!(h.end("a", pid, e, true, 1), E::INVALID_PRODUCER_EPOCH);
    let fx = h.c.markers_done(h.now, j[0].job);
    h.settle(fx);
    assert_eq!(h.state("a").state, TxnState::CompleteAbort);
    // The retry now gets the epoch after the fence.
    assert_eq!(h.init("a", None, 5), Ok((pid, e + 2)));
    assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::PRODUCER_FENCED);
    assert_eq!(h.verify("a", pid, e, &tp("t", 0)), E::PRODUCER_FENCED);
}

impl H {
    pub(crate) fn verify(&self, id: &str, pid: i64, epoch: i16, tp: &TopicPartition) -> E {
        self.c.verify(id, pid, epoch, tp)
    }
}

#[test]
fn add_partitions_codes() {
    let mut h = H::new();
    let (pid, e) = h.init("a", None, 5).expect("pid");
    let t0 = [tp("t", 0)];
    // (id, pid, epoch, version) -> code, before anything is added.
    let cases: Vec<(&str, i64, i16, i16, E)> = vec![
        ("", pid, e, 3, E::INVALID_REQUEST),
        ("xa", pid, e, 3, E::NOT_COORDINATOR),
        ("unknown", pid, e, 3, E::INVALID_PRODUCER_ID_MAPPING),
        ("a", pid + 1, e, 3, E::INVALID_PRODUCER_ID_MAPPING),
        ("a", pid, e + 1, 3, E::PRODUCER_FENCED),
        ("a", pid, e + 1, 2, E::PRODUCER_FENCED),
        ("a", pid, e + 1, 1, E::INVALID_PRODUCER_EPOCH),
        ("a", pid, e - 1, 0, E::INVALID_PRODUCER_EPOCH),
    ];
    for (id, p, ep, v, want) in cases {
        assert_eq!(h.add(id, p, ep, &t0, v), want, "{id} {p} {ep} v{v}");
    }
    assert_eq!(h.state("a").state, TxnState::Empty);
    // The first add opens the transaction at `now`.
    h.now = 5_000;
    assert_eq!(h.add("a", pid, e, &t0, 3), E::NONE);
    let m = h.state("a");
    assert_eq!(
        (m.state, m.start_ms, m.partitions.len()),
        (TxnState::Ongoing, 5_000, 1)
    );
    // All already added: NONE without a write.
    let req = h.add_req("a", pid, e, &t0, 3);
    let fx = h.c.add_partitions(h.now, req);
    assert!(persists(&fx).is_empty());
    assert_eq!(h.reply(fx), Reply::Code(E::NONE));
    // More partitions (and the offsets partition of a group shard) keep the start.
    h.now = 6_000;
    assert_eq!(
        h.add("a", pid, e, &[tp("t", 0), tp(OFFSETS_TOPIC, 3)], 4),
        E::NONE
    );
    let m = h.state("a");
    assert_eq!(
        (m.start_ms, m.last_update_ms, m.partitions.len()),
        (5_000, 6_000, 2)
    );
    // A write in flight: CONCURRENT_TRANSACTIONS for everything else on the id.
    let req = h.add_req("a", pid, e, &[tp("u", 0)], 3);
    let fx = h.c.add_partitions(h.now, req);
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    assert_eq!(
        h.add("a", pid, e, &[tp("v", 0)], 3),
        E::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(h.add("a", pid, e, &t0, 3), E::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("a", pid, e, true, 3), E::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.init("a", None, 5), Err(E::CONCURRENT_TRANSACTIONS));
    assert_eq!(
        h.verify("a", pid, e, &tp("t", 0)),
        E::CONCURRENT_TRANSACTIONS
    );
    // Pid and epoch are still checked first (Kafka's order).
    assert_eq!(
        h.add("a", pid + 1, e, &t0, 3),
        E::INVALID_PRODUCER_ID_MAPPING
    );
    let fx = h.c.written(h.now, p[0].0, true);
    assert_eq!(h.reply(fx), Reply::Code(E::NONE));
    // Prepare*: CONCURRENT_TRANSACTIONS.
    let req = h.end_req("a", pid, e, true, 3);
    let fx = h.c.end_txn(h.now, req);
    let p = persists(&fx);
    let fx = h.c.written(h.now, p[0].0, true);
    let j = jobs(&fx);
    assert_eq!(replies(&fx).len(), 1);
    assert_eq!(
        h.add("a", pid, e, &[tp("w", 0)], 3),
        E::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(h.add("a", pid, e, &t0, 3), E::CONCURRENT_TRANSACTIONS);
    let fx = h.c.markers_done(h.now, j[0].job);
    h.settle(fx);
    // After a commit the next add opens a new transaction with a new start.
    h.now = 9_000;
    assert_eq!(h.add("a", pid, e, &[tp("t", 1)], 3), E::NONE);
    let m = h.state("a");
    assert_eq!((m.start_ms, m.partitions.len()), (9_000, 1));
}

#[test]
fn add_partitions_with_none_is_a_no_op() {
    let mut h = H::new();
    let (pid, e) = h.init("a", None, 5).expect("pid");
    let req = h.add_req("a", pid, e, &[], 3);
    let fx = h.c.add_partitions(h.now, req);
    assert!(persists(&fx).is_empty());
    assert_eq!(h.reply(fx), Reply::Code(E::NONE));
    assert_eq!(h.state("a").state, TxnState::Empty);
}

#[test]
fn end_txn_codes() {
    let mut h = H::new();
    let (pid, e) = h.init("a", None, 5).expect("pid");
    let cases: Vec<(&str, i64, i16, bool, i16, E)> = vec![
        ("", pid, e, true, 3, E::INVALID_REQUEST),
        ("xa", pid, e, true, 3, E::NOT_COORDINATOR),
        ("unknown", pid, e, true, 3, E::INVALID_PRODUCER_ID_MAPPING),
        ("a", pid + 1, e, true, 3, E::INVALID_PRODUCER_ID_MAPPING),
        ("a", pid, e + 1, true, 2, E::PRODUCER_FENCED),
        ("a", pid, e + 1, true, 1, E::INVALID_PRODUCER_EPOCH),
        // Empty: nothing to end.
        ("a", pid, e, true, 3, E::INVALID_TXN_STATE),
        ("a", pid, e, false, 3, E::INVALID_TXN_STATE),
    ];
    for (id, p, ep, commit, v, want) in cases {
        assert_eq!(
            h.end(id, p, ep, commit, v),
            want,
            "{id} {p} {ep} {commit} v{v}"
        );
    }
    for commit in [true, false] {
        assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::NONE);
        assert!(!h.c.completing("a"));
        let req = h.end_req("a", pid, e, commit, 3);
        let fx = h.c.end_txn(h.now, req);
        assert!(replies(&fx).is_empty(), "answered before the write");
        assert!(h.c.completing("a"), "a write in flight");
        let p = persists(&fx);
        let want = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        assert_eq!(p[0].1.as_ref().map(|m| m.state), Some(want));
        let fx = h.c.written(h.now, p[0].0, true);
        // NONE once Prepare is durable, then the markers.
        assert!(matches!(
            fx[0],
            Effect::Reply {
                reply: Reply::Code(E::NONE),
                ..
            }
        ));
        assert!(matches!(fx[1], Effect::WriteMarkers(ref j) if j.commit == commit));
        assert!(h.c.completing("a"), "markers to write");
        let job = jobs(&fx)[0].job;
        // Retries while Prepare: same -> CONCURRENT_TRANSACTIONS, other -> INVALID_TXN_STATE.
        assert_eq!(h.end("a", pid, e, commit, 3), E::CONCURRENT_TRANSACTIONS);
        assert_eq!(h.end("a", pid, e, !commit, 3), E::INVALID_TXN_STATE);
        // Markers done: Complete* persisted, no reply.
        let fx = h.c.markers_done(h.now, job);
        let p = persists(&fx);
        assert_eq!(p.len(), 1);
        assert!(replies(&fx).is_empty());
        assert!(h.c.completing("a"), "the Complete state to write");
        assert!(h.settle(fx).is_empty());
        assert!(!h.c.completing("a"));
        assert!(!h.c.completing("nobody"));
        let m = h.state("a");
        let want = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        assert_eq!(m.state, want);
        assert!(m.partitions.is_empty());
        // Retries after completion: same -> NONE, other -> INVALID_TXN_STATE.
        assert_eq!(h.end("a", pid, e, commit, 3), E::NONE);
        assert_eq!(h.end("a", pid, e, !commit, 3), E::INVALID_TXN_STATE);
        assert_eq!(h.c.job_count(), 0);
    }
}

#[test]
fn failed_writes() {
    let mut h = H::new();
    // A new id whose first write fails does not exist.
    let req = h.init_req("a", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert_eq!(
        h.fail(fx),
        Reply::ProducerId(Err(E::COORDINATOR_NOT_AVAILABLE))
    );
    assert_eq!(h.c.describe("a"), Err(E::TRANSACTIONAL_ID_NOT_FOUND));
    assert_eq!(h.c.id_count(), 0);
    let (pid, e) = h.init("a", None, 5).expect("pid");
    // A failed add leaves the state as it was.
    let req = h.add_req("a", pid, e, &[tp("t", 0)], 3);
    let fx = h.c.add_partitions(h.now, req);
    let p = persists(&fx);
    assert_eq!(h.fail(fx), Reply::Code(E::COORDINATOR_NOT_AVAILABLE));
    assert_eq!(h.state("a").state, TxnState::Empty);
    assert_eq!(h.c.open_count(), 0);
    // The same write reported twice is ignored.
    assert!(h.c.written(h.now, p[0].0, true).is_empty());
    assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::NONE);
    // A failed EndTxn: Ongoing stays.
    let req = h.end_req("a", pid, e, true, 3);
    let fx = h.c.end_txn(h.now, req);
    assert_eq!(h.fail(fx), Reply::Code(E::COORDINATOR_NOT_AVAILABLE));
    assert_eq!(h.state("a").state, TxnState::Ongoing);
    // A failed fence: epoch unchanged, the retry bumps once.
    let req = h.init_req("a", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert_eq!(
        h.fail(fx),
        Reply::ProducerId(Err(E::COORDINATOR_NOT_AVAILABLE))
    );
    assert_eq!(h.state("a").producer_epoch, e);
    assert_eq!(h.init("a", None, 5), Err(E::CONCURRENT_TRANSACTIONS));
    assert_eq!(h.state("a").producer_epoch, e + 1);
    assert_eq!(h.init("a", None, 5), Ok((pid, e + 2)));
    // A failed Complete* write stays pending (the driver retries it).
    let e = e + 2;
    assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::NONE);
    let req = h.end_req("a", pid, e, true, 3);
    let fx = h.c.end_txn(h.now, req);
    let p = persists(&fx);
    let fx = h.c.written(h.now, p[0].0, true);
    let job = jobs(&fx)[0].job;
    let fx = h.c.markers_done(h.now, job);
    let p = persists(&fx);
    assert!(h.c.written(h.now, p[0].0, false).is_empty());
    assert_eq!(h.state("a").state, TxnState::PrepareCommit);
    assert_eq!(h.end("a", pid, e, true, 3), E::CONCURRENT_TRANSACTIONS);
    assert!(h.c.written(h.now, p[0].0, true).is_empty());
    assert_eq!(h.state("a").state, TxnState::CompleteCommit);
    assert_eq!(h.end("a", pid, e, true, 3), E::NONE);
}

#[test]
fn verify_codes() {
    let mut h = H::new();
    let (pid, e) = h.init("a", None, 5).expect("pid");
    let t0 = tp("t", 0);
    // Not in a transaction yet.
    assert_eq!(h.verify("a", pid, e, &t0), E::INVALID_TXN_STATE);
    assert_eq!(h.add("a", pid, e, std::slice::from_ref(&t0), 3), E::NONE);
    assert_eq!(h.verify("a", pid, e, &t0), E::NONE);
    let cases: Vec<(&str, i64, i16, TopicPartition, E)> = vec![
        ("a", pid, e, tp("t", 1), E::INVALID_TXN_STATE),
        ("a", pid, e - 1, t0.clone(), E::PRODUCER_FENCED),
        ("a", pid, e + 1, t0.clone(), E::INVALID_TXN_STATE),
        ("a", pid + 1, e, t0.clone(), E::INVALID_TXN_STATE),
        ("b", pid, e, t0.clone(), E::INVALID_TXN_STATE),
        ("xa", pid, e, t0.clone(), E::NOT_COORDINATOR),
    ];
    for (id, p, ep, t, want) in cases {
        assert_eq!(h.verify(id, p, ep, &t), want, "{id} {p} {ep} {t:?}");
    }
    // Ending: retriable while the markers run, refused after.
    let req = h.end_req("a", pid, e, false, 3);
    let fx = h.c.end_txn(h.now, req);
    let p = persists(&fx);
    let fx = h.c.written(h.now, p[0].0, true);
    assert_eq!(h.verify("a", pid, e, &t0), E::CONCURRENT_TRANSACTIONS);
    h.settle(fx);
    assert_eq!(h.verify("a", pid, e, &t0), E::INVALID_TXN_STATE);
}

#[test]
fn describe_and_list() {
    let mut h = H::new();
    assert_eq!(h.c.describe("a"), Err(E::TRANSACTIONAL_ID_NOT_FOUND));
    assert_eq!(h.c.describe("xa"), Err(E::NOT_COORDINATOR));
    let (pa, ea) = h.init("a", None, 5).expect("pid");
    let (pb, eb) = h.init("b", None, 5).expect("pid");
    let (pc, ec) = h.init("c", None, 5).expect("pid");
    h.now = 10_000;
    assert_eq!(h.add("a", pa, ea, &[tp("t", 0)], 3), E::NONE);
    h.now = 20_000;
    assert_eq!(h.add("b", pb, eb, &[tp("t", 0)], 3), E::NONE);
    assert_eq!(h.end("b", pb, eb, true, 3), E::NONE);
    let m = h.c.describe("a").expect("a");
    assert_eq!(
        (m.producer_id, m.state.name(), m.start_ms),
        (pa, "Ongoing", 10_000)
    );
    let ids = |v: Vec<&TxnMetadata>| {
        v.into_iter()
            .map(|m| m.transactional_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(h.c.list(h.now, &[], &[], -1)), ["a", "b", "c"]);
    assert_eq!(ids(h.c.list(h.now, &[TxnState::Ongoing], &[], -1)), ["a"]);
    assert_eq!(
        ids(h
            .c
            .list(h.now, &[TxnState::CompleteCommit, TxnState::Empty], &[], -1)),
        ["b", "c"]
    );
    assert_eq!(ids(h.c.list(h.now, &[], &[pc, pa], -1)), ["a", "c"]);
    assert_eq!(
        ids(h.c.list(h.now, &[TxnState::Ongoing], &[pb], -1)),
        Vec::<String>::new()
    );
    // Duration: strictly longer than the filter; a state without a start always passes.
    let _ = ec;
    assert_eq!(ids(h.c.list(h.now, &[], &[], 9_999)), ["a", "c"]);
    assert_eq!(ids(h.c.list(h.now, &[], &[], 10_000)), ["c"]);
    assert_eq!(ids(h.c.list(h.now, &[], &[], 0)), ["a", "c"]);
}

#[test]
fn timeouts_abort_with_a_fence() {
    let mut h = H::new();
    let req = h.init_req("a", 5_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    let Reply::ProducerId(Ok((pid, e))) = h.reply(fx) else {
        panic!("init");
    };
    assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::NONE);
    // Started at 1 000 with a 5 s timeout: due strictly after 6 000.
    assert!(h.c.tick(6_000).is_empty());
    let due = h.c.next_deadline().expect("deadline");
    assert!(due > 6_000);
    // Never more often than the abort check interval.
    assert_eq!(due, 6_000 + h.c.config().abort_check_interval_ms);
    let fx = h.c.tick(due);
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    let m = p[0].1.clone().expect("state");
    assert_eq!((m.state, m.producer_epoch), (TxnState::PrepareAbort, e + 1));
    assert!(replies(&fx).is_empty());
    h.now = due;
    let fx = h.c.written(h.now, p[0].0, true);
    let j = jobs(&fx);
    assert_eq!((j[0].producer_epoch, j[0].commit), (e + 1, false));
    assert!(h.settle(fx).is_empty());
    assert_eq!(h.state("a").state, TxnState::CompleteAbort);
    // The timed-out producer is fenced.
    assert_eq!(h.end("a", pid, e, true, 3), E::PRODUCER_FENCED);
    assert_eq!(h.add("a", pid, e, &[tp("t", 0)], 3), E::PRODUCER_FENCED);
    // A failed timeout fence is tried again at a later tick.
    assert_eq!(h.init("a", None, 5), Ok((pid, e + 2)));
    assert_eq!(h.add("a", pid, e + 2, &[tp("t", 0)], 3), E::NONE);
    // (h.init asks for a 60 s timeout.)
    let at = h.now + 60_001;
    let fx = h.c.tick(at);
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    assert!(h.c.written(at, p[0].0, false).is_empty());
    assert_eq!(h.state("a").producer_epoch, e + 2);
    let fx = h.c.tick(at + h.c.config().abort_check_interval_ms);
    assert_eq!(persists(&fx).len(), 1);
}

#[test]
fn idle_ids_expire() {
    let config = TxnConfig {
        id_expiration_ms: 100_000,
        abort_check_interval_ms: 1,
        ..TxnConfig::default()
    };
    let mut h = H::with(config);
    let (pid, e) = h.init("a", None, 5).expect("pid");
    let (pb, eb) = h.init("b", None, 5).expect("pid");
    h.now = 41_000;
    assert_eq!(h.add("b", pb, eb, &[tp("t", 0)], 3), E::NONE);
    assert!(h.c.tick(100_999).is_empty());
    assert_eq!(h.c.next_deadline(), Some(101_000));
    // a expires: deleted.
    let fx = h.c.tick(101_000);
    assert_eq!(
        persists(&fx).into_iter().map(|p| p.1).collect::<Vec<_>>(),
        vec![None]
    );
    h.now = 101_000;
    h.settle(fx);
    assert_eq!(h.c.describe("a"), Err(E::TRANSACTIONAL_ID_NOT_FOUND));
    // b, Ongoing, does not expire: it times out at its own pace.
    assert_eq!(h.c.next_deadline(), Some(101_001));
    let fx = h.c.tick(101_001);
    assert_eq!(persists(&fx).len(), 1);
    h.now = 101_001;
    h.settle(fx);
    assert_eq!(h.state("b").state, TxnState::CompleteAbort);
    assert_eq!(h.c.next_deadline(), Some(201_001));
    // A forgotten id starts over with a new producer id.
    let (pid2, e2) = h.init("a", None, 5).expect("pid");
    assert_ne!(pid2, pid);
    assert_eq!((e, e2), (0, 0));
}

#[test]
fn bounds() {
    let config = TxnConfig {
        max_partitions_per_txn: 3,
        max_transactional_ids: 3,
        max_open_txns: 2,
        id_expiration_ms: 100_000,
        ..TxnConfig::default()
    };
    let mut h = H::with(config);
    let mut producers = Vec::new();
    for id in ["a", "b", "c"] {
        producers.push(h.init(id, None, 5).expect("pid"));
    }
    // A fourth id: COORDINATOR_NOT_AVAILABLE, nothing expired yet.
    let req = h.init_req("d", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert!(persists(&fx).is_empty());
    assert_eq!(
        h.reply(fx),
        Reply::ProducerId(Err(E::COORDINATOR_NOT_AVAILABLE))
    );
    // Known ids still bump.
    let (pa, ea) = h.init("a", None, 5).expect("pid");
    let (pb, eb) = producers[1];
    let (pc, ec) = producers[2];
    // Partitions per transaction.
    let four: Vec<_> = (0..4).map(|p| tp("t", p)).collect();
    assert_eq!(h.add("a", pa, ea, &four, 3), E::INVALID_REQUEST);
    assert_eq!(h.add("a", pa, ea, &four[..2], 3), E::NONE);
    assert_eq!(h.add("a", pa, ea, &four[1..], 3), E::INVALID_REQUEST);
    assert_eq!(h.add("a", pa, ea, &four[1..3], 3), E::NONE);
    assert_eq!(h.state("a").partitions.len(), 3);
    // Open transactions: a and b open, c waits.
    assert_eq!(h.add("b", pb, eb, &four[..1], 3), E::NONE);
    assert_eq!(h.c.open_count(), 2);
    assert_eq!(
        h.add("c", pc, ec, &four[..1], 3),
        E::CONCURRENT_TRANSACTIONS
    );
    // Adding to an open one is fine.
    assert_eq!(h.add("b", pb, eb, &four[..2], 3), E::NONE);
    // Prepare still counts; Complete frees the slot.
    let req = h.end_req("b", pb, eb, true, 3);
    let fx = h.c.end_txn(h.now, req);
    let p = persists(&fx);
    let fx = h.c.written(h.now, p[0].0, true);
    assert_eq!(
        h.add("c", pc, ec, &four[..1], 3),
        E::CONCURRENT_TRANSACTIONS
    );
    h.settle(fx);
    assert_eq!(h.c.open_count(), 1);
    assert_eq!(h.add("c", pc, ec, &four[..1], 3), E::NONE);
    // Ids: once one is idle past the expiration, a new id deletes it and retries in
    // (the look for expired ids is made at most once per check interval).
    h.now += 100_000 - 1;
    let req = h.init_req("d", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert!(persists(&fx).is_empty());
    h.now += 1;
    let req = h.init_req("d", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    assert!(
        persists(&fx).is_empty(),
        "b expired, but the look was just made"
    );
    h.now += h.c.config().abort_check_interval_ms - 1;
    let req = h.init_req("d", 60_000, None, 5);
    let fx = h.c.init_producer_id(h.now, req);
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].1, None);
    assert_eq!(
        h.settle(fx),
        vec![(
            RequestId(h.next_request),
            Reply::ProducerId(Err(E::COORDINATOR_NOT_AVAILABLE))
        )]
    );
    assert_eq!(h.c.describe("b"), Err(E::TRANSACTIONAL_ID_NOT_FOUND));
    assert!(h.init("d", None, 5).is_ok());
    assert_eq!(h.c.id_count(), 3);
}

#[test]
fn load_resumes_prepared_transactions() {
    let mut h = H::new();
    let (pa, ea) = h.init("a", None, 5).expect("pid");
    let (pb, eb) = h.init("b", None, 5).expect("pid");
    let (pc, ec) = h.init("c", None, 5).expect("pid");
    assert_eq!(h.add("a", pa, ea, &[tp("t", 0)], 3), E::NONE);
    assert_eq!(h.add("b", pb, eb, &[tp("t", 1)], 3), E::NONE);
    // b's commit is durable, its markers are still running when the shard moves.
    let req = h.end_req("b", pb, eb, true, 3);
    let fx = h.c.end_txn(h.now, req);
    let p = persists(&fx);
    let fx = h.c.written(h.now, p[0].0, true);
    let old_job = jobs(&fx)[0].job;
    // c's bump is in flight when the shard moves.
    let req = h.init_req("c", 60_000, None, 5);
    let c_req = req.request;
    let fx = h.c.init_producer_id(h.now, req);
    let c_write = persists(&fx)[0].0;
    let stored: Vec<TxnMetadata> = ["a", "b", "c"]
        .iter()
        .map(|id| snapshot::decode(&snapshot::encode(&h.state(id))).expect("decodes"))
        .collect();
    let fx = h.c.unload(0);
    assert!(fx.contains(&Effect::CancelMarkers(old_job)));
    assert!(fx.contains(&Effect::Reply {
        request: c_req,
        reply: Reply::ProducerId(Err(E::NOT_COORDINATOR)),
    }));
    assert_eq!(fx.len(), 2);
    assert_eq!(
        (h.c.id_count(), h.c.open_count(), h.c.job_count()),
        (0, 0, 0)
    );
    assert_eq!(h.c.describe("a"), Err(E::NOT_COORDINATOR));
    assert_eq!(h.c.verify("a", pa, ea, &tp("t", 0)), E::NOT_COORDINATOR);
    assert_eq!(h.add("a", pa, ea, &[tp("t", 0)], 3), E::NOT_COORDINATOR);
    assert_eq!(h.end("a", pa, ea, true, 3), E::NOT_COORDINATOR);
    assert_eq!(h.init("a", None, 5), Err(E::NOT_COORDINATOR));
    // The late write and markers of the old ownership are ignored.
    assert!(h.c.written(h.now, c_write, true).is_empty());
    assert!(h.c.markers_done(h.now, old_job).is_empty());
    assert!(h.c.unload(0).is_empty());
    // Taken over again with a new coordinator epoch (a foreign state is skipped).
    let mut foreign = h.state_or(&stored[0]);
    foreign.transactional_id = "xforeign".to_owned();
    let mut states = stored.clone();
    states.push(foreign);
    h.now = 2_000_000;
    let fx = h.c.load(h.now, 0, 12, states);
    let j = jobs(&fx);
    assert_eq!(fx.len(), 1);
    assert_eq!(
        (
            j[0].transactional_id.as_str(),
            j[0].producer_epoch,
            j[0].coordinator_epoch,
            j[0].commit
        ),
        ("b", eb, 12, true)
    );
    assert_eq!(h.c.id_count(), 3);
    assert_eq!(h.c.open_count(), 2);
    assert_eq!(h.end("b", pb, eb, true, 3), E::CONCURRENT_TRANSACTIONS);
    let fx = h.c.markers_done(h.now, j[0].job);
    h.settle(fx);
    assert_eq!(h.end("b", pb, eb, true, 3), E::NONE);
    // a kept its start; long past its timeout it is aborted at the next tick.
    assert_eq!(h.state("a").start_ms, 1_000);
    assert_eq!(h.verify("a", pa, ea, &tp("t", 0)), E::NONE);
    let fx = h.c.tick(h.now);
    assert_eq!(jobs(&fx).len(), 0);
    assert_eq!(persists(&fx).len(), 1);
    h.settle(fx);
    assert_eq!(h.state("a").state, TxnState::CompleteAbort);
    // c answers with its stored (pre-bump) state.
    assert_eq!(h.init("c", Some((pc, ec)), 5), Ok((pc, ec + 1)));
}

impl H {
    fn state_or(&self, m: &TxnMetadata) -> TxnMetadata {
        self.c
            .describe(&m.transactional_id)
            .cloned()
            .unwrap_or_else(|_| m.clone())
    }
}

#[test]
fn load_drops_dead_and_completes_empty_prepares() {
    let mut c = TxnCoordinator::new(TxnConfig::default(), shard_of);
    let base = TxnMetadata {
        transactional_id: "a".to_owned(),
        producer_id: 5,
        last_producer_id: -1,
        producer_epoch: 1,
        last_producer_epoch: -1,
        timeout_ms: 1000,
        state: TxnState::Dead,
        partitions: BTreeSet::new(),
        start_ms: -1,
        last_update_ms: 0,
    };
    let mut empty_prepare = base.clone();
    empty_prepare.transactional_id = "b".to_owned();
    empty_prepare.state = TxnState::PrepareAbort;
    let fx = c.load(0, 0, 1, vec![base, empty_prepare]);
    assert_eq!(c.describe("a"), Err(E::TRANSACTIONAL_ID_NOT_FOUND));
    let p = persists(&fx);
    assert_eq!(p.len(), 1);
    assert_eq!(
        p[0].1.as_ref().map(|m| m.state),
        Some(TxnState::CompleteAbort)
    );
    assert!(c.written(0, p[0].0, true).is_empty());
    assert_eq!(
        c.describe("b").map(|m| m.state),
        Ok(TxnState::CompleteAbort)
    );
    // Loading a loaded shard again replaces it.
    let fx = c.load(0, 0, 2, Vec::new());
    assert!(fx.is_empty());
    assert_eq!(c.coordinator_epoch(0), Some(2));
    assert_eq!(c.id_count(), 0);
}
