//! The transition rules: one [`TxnCoordinator`] for the transactional ids of the shards
//! this process coordinates.
//!
//! Every request is checked against the durable state of its id (the last state whose
//! write completed). A request that changes it does not change it: it records the
//! target state as the id's *pending* transition and asks the driver to write it
//! ([`Effect::Persist`]); only [`TxnCoordinator::written`] applies it, answers the
//! waiting request and starts what follows (markers). So at most one write per id is in
//! flight, and a failed write leaves the durable state exactly as it was.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::ErrorCode;

use crate::{
    AddPartitions, Effect, EndTxn, InitProducerId, JobId, MarkerJob, Millis, Reply, RequestId,
    TopicPartition, TxnConfig, TxnMetadata, TxnState, WriteId,
};

/// No producer id / epoch (Kafka's `RecordBatch.NO_PRODUCER_ID` / `NO_PRODUCER_EPOCH`).
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

/// An epoch from which no further bump is handed out: the next InitProducerId gets a
/// new producer id instead (Kafka's `isEpochExhausted`). One value is left above it
/// for the bump of a fence.
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// States holding a transaction (counted against `max_open_txns`).
fn is_open(state: TxnState) -> bool {
    matches!(
        state,
        TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
    )
}

/// PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for versions older than `since` (clients
/// that predate the code).
fn fenced(version: i16, since: i16) -> ErrorCode {
    if version < since {
        ErrorCode::INVALID_PRODUCER_EPOCH
    } else {
        ErrorCode::PRODUCER_FENCED
    }
}

/// The shape of a waiting request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyKind {
    ProducerId,
    Code,
}

impl ReplyKind {
    fn error(self, code: ErrorCode) -> Reply {
        match self {
            ReplyKind::ProducerId => Reply::ProducerId(Err(code)),
            ReplyKind::Code => Reply::Code(code),
        }
    }
}

/// A request answered when its write completes.
#[derive(Debug)]
struct Waiting {
    request: RequestId,
    kind: ReplyKind,
    /// The answer once the write is durable.
    ok: Reply,
}

impl Waiting {
    /// A request of a [`Reply::Code`] answer, NONE once written.
    fn none(request: RequestId) -> Waiting {
        Waiting {
            request,
            kind: ReplyKind::Code,
            ok: Reply::Code(ErrorCode::NONE),
        }
    }
}

/// The immediate answer `code` to `request`.
fn answer_code(request: RequestId, code: ErrorCode) -> Vec<Effect> {
    vec![Effect::Reply {
        request,
        reply: Reply::Code(code),
    }]
}

/// A transition being written.
#[derive(Debug)]
struct Pending {
    write: WriteId,
    /// The state once written; `None` deletes the id.
    target: Option<TxnMetadata>,
    waiting: Option<Waiting>,
    /// Start the marker job once written (the target is PrepareCommit/PrepareAbort).
    markers: bool,
    /// The driver retries this write until it succeeds (Complete*, deletions): a
    /// reported failure keeps it pending.
    retried: bool,
}

/// One transactional id of a loaded shard.
#[derive(Debug)]
struct Entry {
    shard: u32,
    /// The durable state; `None` while the id's first write is in flight.
    meta: Option<TxnMetadata>,
    pending: Option<Pending>,
    /// The marker job of a PrepareCommit/PrepareAbort state.
    job: Option<JobId>,
}

impl Entry {
    /// Whether the entry counts against `max_open_txns`: it holds a transaction or is
    /// being written into one.
    fn open(&self) -> bool {
        self.meta.as_ref().is_some_and(|m| is_open(m.state))
            || self
                .pending
                .as_ref()
                .and_then(|p| p.target.as_ref())
                .is_some_and(|m| is_open(m.state))
    }
}

fn adjust(count: &mut usize, before: bool, after: bool) {
    match (before, after) {
        (false, true) => *count += 1,
        (true, false) => *count = count.saturating_sub(1),
        _ => {}
    }
}

/// The coordinator of the transactional ids of the loaded shards (see the crate docs for
/// the protocol its driver follows).
#[derive(Debug)]
pub struct TxnCoordinator {
    config: TxnConfig,
    shard_of: fn(&str) -> u32,
    /// Loaded shards and their coordinator epochs.
    shards: BTreeMap<u32, i32>,
    /// Ids of the loaded shards (ordered, so effects come out in a deterministic order).
    ids: BTreeMap<String, Entry>,
    writes: HashMap<WriteId, String>,
    jobs: HashMap<JobId, String>,
    next_write: u64,
    next_job: u64,
    /// Entries for which [`Entry::open`] holds.
    open: usize,
    /// No timer fires before this (may be early, never late).
    next_due: Option<Millis>,
    /// The last [`TxnCoordinator::tick`].
    last_scan: Millis,
    /// The last look for expired ids made to admit a new one (at most one per
    /// `abort_check_interval_ms`: a flood of new ids does not rescan every id each time).
    last_sweep: Millis,
}

impl TxnCoordinator {
    /// A coordinator with no shard loaded; `shard_of` names the shard of a transactional
    /// id (the group-coordinator shard function).
    pub fn new(config: TxnConfig, shard_of: fn(&str) -> u32) -> Self {
        TxnCoordinator {
            config,
            shard_of,
            shards: BTreeMap::new(),
            ids: BTreeMap::new(),
            writes: HashMap::new(),
            jobs: HashMap::new(),
            next_write: 0,
            next_job: 0,
            open: 0,
            next_due: None,
            last_scan: Millis::MIN,
            last_sweep: Millis::MIN,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// Whether `shard` is loaded.
    pub fn is_loaded(&self, shard: u32) -> bool {
        self.shards.contains_key(&shard)
    }

    /// The coordinator epoch `shard` was loaded with.
    pub fn coordinator_epoch(&self, shard: u32) -> Option<i32> {
        self.shards.get(&shard).copied()
    }

    /// Transactional ids held (all loaded shards, including ids being created).
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    /// Transactions open (Ongoing or Prepare*, or being written into Ongoing).
    pub fn open_count(&self) -> usize {
        self.open
    }

    /// Marker jobs running.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    fn loaded_for(&self, id: &str) -> bool {
        self.shards.contains_key(&(self.shard_of)(id))
    }

    /// Records `target` as `id`'s pending transition and asks for its write. The caller
    /// has checked that `id` is held and has no write in flight.
    fn persist(
        &mut self,
        id: &str,
        target: Option<TxnMetadata>,
        waiting: Option<Waiting>,
        markers: bool,
        retried: bool,
    ) -> Vec<Effect> {
        let Some(e) = self.ids.get_mut(id) else {
            return Vec::new();
        };
        let write = WriteId(self.next_write);
        self.next_write += 1;
        let before = e.open();
        let effect = Effect::Persist {
            write,
            transactional_id: id.to_owned(),
            state: target.clone(),
        };
        e.pending = Some(Pending {
            write,
            target,
            waiting,
            markers,
            retried,
        });
        adjust(&mut self.open, before, e.open());
        self.writes.insert(write, id.to_owned());
        vec![effect]
    }

    /// When the timers next have something to do for `m` (expiry or transaction timeout).
    fn due_of(&self, m: &TxnMetadata) -> Option<Millis> {
        match m.state {
            TxnState::Ongoing => Some(
                m.start_ms
                    .saturating_add(Millis::from(m.timeout_ms))
                    .saturating_add(1),
            ),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => Some(
                m.last_update_ms
                    .saturating_add(self.config.id_expiration_ms),
            ),
            _ => None,
        }
    }

    fn note_due(&mut self, id: &str) {
        let due = self
            .ids
            .get(id)
            .and_then(|e| e.meta.as_ref())
            .and_then(|m| self.due_of(m));
        if let Some(due) = due {
            self.next_due = Some(self.next_due.map_or(due, |d| d.min(due)));
        }
    }

    /// Starts the marker job of `id`'s durable Prepare* state (a transaction without
    /// partitions completes at once).
    fn start_markers(&mut self, now: Millis, id: &str) -> Vec<Effect> {
        let Some(e) = self.ids.get_mut(id) else {
            return Vec::new();
        };
        let Some(m) = e.meta.as_ref() else {
            return Vec::new();
        };
        let commit = match m.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return Vec::new(),
        };
        if m.partitions.is_empty() {
            let done = completed(m, now);
            return self.persist(id, Some(done), None, false, true);
        }
        let job = JobId(self.next_job);
        self.next_job += 1;
        let effect = Effect::WriteMarkers(MarkerJob {
            job,
            transactional_id: id.to_owned(),
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: self.shards.get(&e.shard).copied().unwrap_or(0),
            commit,
            partitions: m.partitions.iter().cloned().collect(),
        });
        e.job = Some(job);
        self.jobs.insert(job, id.to_owned());
        vec![effect]
    }

    /// Bumps the epoch of `id`'s Ongoing transaction and aborts it (a fencing
    /// InitProducerId or a timeout).
    fn fence(&mut self, now: Millis, id: &str, waiting: Option<Waiting>) -> Vec<Effect> {
        let Some(m) = self.ids.get(id).and_then(|e| e.meta.as_ref()) else {
            return Vec::new();
        };
        let mut target = m.clone();
        // An epoch at i16::MAX is never handed out (see `epoch_exhausted`); a stored one
        // that is stays, the markers still close the transaction.
        target.producer_epoch = target.producer_epoch.saturating_add(1);
        target.last_producer_epoch = NO_PRODUCER_EPOCH;
        target.state = TxnState::PrepareAbort;
        target.last_update_ms = now;
        self.persist(id, Some(target), waiting, true, false)
    }

    /// Ids idle past `id_expiration_ms` (Empty/Complete*, nothing in flight).
    fn expired(&self, now: Millis) -> Vec<String> {
        self.ids
            .iter()
            .filter(|(_, e)| e.pending.is_none() && e.job.is_none())
            .filter_map(|(id, e)| {
                let m = e.meta.as_ref()?;
                let idle = matches!(
                    m.state,
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                );
                (idle
                    && m.last_update_ms
                        .saturating_add(self.config.id_expiration_ms)
                        <= now)
                    .then(|| id.clone())
            })
            .collect()
    }

    /// InitProducerId with a transactional id. Answers [`Reply::ProducerId`].
    pub fn init_producer_id(&mut self, now: Millis, req: InitProducerId) -> Vec<Effect> {
        let refuse = |code: ErrorCode| {
            vec![Effect::Reply {
                request: req.request,
                reply: Reply::ProducerId(Err(code)),
            }]
        };
        let id = req.transactional_id.as_str();
        if id.is_empty() {
            return refuse(ErrorCode::INVALID_REQUEST);
        }
        if req.timeout_ms <= 0 || req.timeout_ms > self.config.max_timeout_ms {
            return refuse(ErrorCode::INVALID_TRANSACTION_TIMEOUT);
        }
        let shard = (self.shard_of)(id);
        if !self.shards.contains_key(&shard) {
            return refuse(ErrorCode::NOT_COORDINATOR);
        }
        let Some(e) = self.ids.get(id) else {
            if self.ids.len() >= self.config.max_transactional_ids {
                // Make room for the retry: expired ids are deleted once their tombstones
                // are written.
                let mut effects = Vec::new();
                if now
                    >= self
                        .last_sweep
                        .saturating_add(self.config.abort_check_interval_ms)
                {
                    self.last_sweep = now;
                    for old in self.expired(now) {
                        effects.extend(self.persist(&old, None, None, false, true));
                    }
                }
                effects.extend(refuse(ErrorCode::COORDINATOR_NOT_AVAILABLE));
                return effects;
            }
            let m = TxnMetadata {
                transactional_id: id.to_owned(),
                producer_id: req.fresh_producer_id,
                last_producer_id: NO_PRODUCER_ID,
                producer_epoch: 0,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms: req.timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                last_update_ms: now,
            };
            self.ids.insert(
                id.to_owned(),
                Entry {
                    shard,
                    meta: None,
                    pending: None,
                    job: None,
                },
            );
            let waiting = Waiting {
                request: req.request,
                kind: ReplyKind::ProducerId,
                ok: Reply::ProducerId(Ok((req.fresh_producer_id, 0))),
            };
            return self.persist(id, Some(m), Some(waiting), false, false);
        };
        let Some(m) = e.meta.as_ref().filter(|_| e.pending.is_none()) else {
            return refuse(ErrorCode::CONCURRENT_TRANSACTIONS);
        };
        if let Some((pid, epoch)) = req.expected {
            // A retry after a lost answer, or a producer resuming after an error, may
            // only continue the id's current producer (or the one an exhausted epoch
            // just replaced).
            let valid = m.producer_epoch == NO_PRODUCER_EPOCH
                || pid == m.producer_id
                || (pid == m.last_producer_id && epoch_exhausted(epoch));
            if !valid {
                return refuse(fenced(req.version, 4));
            }
        }
        let state = m.state;
        match state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Dead => {
                refuse(ErrorCode::CONCURRENT_TRANSACTIONS)
            }
            TxnState::Ongoing => {
                // The open transaction is aborted with a bumped epoch; the producer
                // retries and then gets the epoch after it.
                let waiting = Waiting {
                    request: req.request,
                    kind: ReplyKind::ProducerId,
                    ok: Reply::ProducerId(Err(ErrorCode::CONCURRENT_TRANSACTIONS)),
                };
                self.fence(now, id, Some(waiting))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let expected_epoch = req.expected.map(|(_, e)| e);
                let (pid, last_pid, epoch, last_epoch) = if epoch_exhausted(m.producer_epoch)
                    && expected_epoch.is_none_or(|e| e == m.producer_epoch)
                {
                    let last = if req.expected.is_some() {
                        m.producer_epoch
                    } else {
                        NO_PRODUCER_EPOCH
                    };
                    (req.fresh_producer_id, m.producer_id, 0, last)
                } else {
                    match expected_epoch {
                        None if !epoch_exhausted(m.producer_epoch) => (
                            m.producer_id,
                            m.last_producer_id,
                            m.producer_epoch + 1,
                            NO_PRODUCER_EPOCH,
                        ),
                        Some(e)
                            if !epoch_exhausted(m.producer_epoch)
                                && (m.producer_epoch == NO_PRODUCER_EPOCH
                                    || e == m.producer_epoch) =>
                        {
                            (
                                m.producer_id,
                                m.last_producer_id,
                                m.producer_epoch + 1,
                                m.producer_epoch,
                            )
                        }
                        // The retry of a bump whose answer was lost: the same epoch again.
                        Some(e) if e == m.last_producer_epoch => (
                            m.producer_id,
                            m.last_producer_id,
                            m.producer_epoch,
                            m.last_producer_epoch,
                        ),
                        _ => return refuse(fenced(req.version, 4)),
                    }
                };
                let mut target = m.clone();
                target.producer_id = pid;
                target.last_producer_id = last_pid;
                target.producer_epoch = epoch;
                target.last_producer_epoch = last_epoch;
                target.timeout_ms = req.timeout_ms;
                target.state = TxnState::Empty;
                target.partitions.clear();
                target.start_ms = -1;
                target.last_update_ms = now;
                let waiting = Waiting {
                    request: req.request,
                    kind: ReplyKind::ProducerId,
                    ok: Reply::ProducerId(Ok((pid, epoch))),
                };
                self.persist(id, Some(target), Some(waiting), false, false)
            }
        }
    }

    /// Checks `producer_id`/`producer_epoch` against `id`'s durable state: the state, or
    /// the code to answer.
    fn producer_state(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        version: i16,
    ) -> Result<&TxnMetadata, ErrorCode> {
        if id.is_empty() {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        if !self.loaded_for(id) {
            return Err(ErrorCode::NOT_COORDINATOR);
        }
        let e = self
            .ids
            .get(id)
            .ok_or(ErrorCode::INVALID_PRODUCER_ID_MAPPING)?;
        let m = e
            .meta
            .as_ref()
            .ok_or(ErrorCode::INVALID_PRODUCER_ID_MAPPING)?;
        if m.producer_id != producer_id {
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if m.producer_epoch != producer_epoch {
            return Err(fenced(version, 2));
        }
        if e.pending.is_some() {
            return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        Ok(m)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn. Answers one [`Reply::Code`] for every
    /// partition of the request.
    pub fn add_partitions(&mut self, now: Millis, req: AddPartitions) -> Vec<Effect> {
        let answer = |code| answer_code(req.request, code);
        let id = req.transactional_id.as_str();
        let m = match self.producer_state(id, req.producer_id, req.producer_epoch, req.version) {
            Ok(m) => m,
            Err(code) => return answer(code),
        };
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Dead => {
                return answer(ErrorCode::CONCURRENT_TRANSACTIONS);
            }
            _ => {}
        }
        let added: BTreeSet<&TopicPartition> = req
            .partitions
            .iter()
            .filter(|tp| !m.partitions.contains(*tp))
            .collect();
        if added.is_empty() && (m.state == TxnState::Ongoing || req.partitions.is_empty()) {
            return answer(ErrorCode::NONE);
        }
        if m.partitions.len().saturating_add(added.len()) > self.config.max_partitions_per_txn {
            return answer(ErrorCode::INVALID_REQUEST);
        }
        let opens = m.state != TxnState::Ongoing;
        if opens && self.open >= self.config.max_open_txns {
            return answer(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        let mut target = m.clone();
        target.partitions.extend(added.into_iter().cloned());
        target.state = TxnState::Ongoing;
        if opens {
            target.start_ms = now;
        }
        target.last_update_ms = now;
        let waiting = Waiting::none(req.request);
        self.persist(id, Some(target), Some(waiting), false, false)
    }

    /// EndTxn. Answers [`Reply::Code`]: NONE once the Prepare state is durable (the
    /// markers follow), or why not.
    pub fn end_txn(&mut self, now: Millis, req: EndTxn) -> Vec<Effect> {
        let answer = |code| answer_code(req.request, code);
        let id = req.transactional_id.as_str();
        let m = match self.producer_state(id, req.producer_id, req.producer_epoch, req.version) {
            Ok(m) => m,
            Err(code) => return answer(code),
        };
        let target_state = match (m.state, req.commit) {
            (TxnState::Ongoing, true) => TxnState::PrepareCommit,
            (TxnState::Ongoing, false) => TxnState::PrepareAbort,
            // The retry of an EndTxn whose answer was lost.
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                return answer(ErrorCode::NONE);
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                return answer(ErrorCode::CONCURRENT_TRANSACTIONS);
            }
            _ => return answer(ErrorCode::INVALID_TXN_STATE),
        };
        let mut target = m.clone();
        target.state = target_state;
        target.last_update_ms = now;
        let waiting = Waiting::none(req.request);
        self.persist(id, Some(target), Some(waiting), true, false)
    }

    /// Whether `tp` is in `id`'s ongoing transaction of that producer id and epoch
    /// (the verification a partition leader asks before a producer's first
    /// transactional write there): NONE if so; PRODUCER_FENCED for an older epoch of the
    /// id's producer; CONCURRENT_TRANSACTIONS while the id has a write in flight or its
    /// transaction is ending (retriable); NOT_COORDINATOR when `id`'s shard is not
    /// loaded; INVALID_TXN_STATE otherwise.
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        tp: &TopicPartition,
    ) -> ErrorCode {
        if !self.loaded_for(id) {
            return ErrorCode::NOT_COORDINATOR;
        }
        let Some(e) = self.ids.get(id) else {
            return ErrorCode::INVALID_TXN_STATE;
        };
        let Some(m) = e.meta.as_ref() else {
            return ErrorCode::INVALID_TXN_STATE;
        };
        if m.producer_id != producer_id {
            return ErrorCode::INVALID_TXN_STATE;
        }
        if producer_epoch < m.producer_epoch {
            return ErrorCode::PRODUCER_FENCED;
        }
        if producer_epoch != m.producer_epoch {
            return ErrorCode::INVALID_TXN_STATE;
        }
        if e.pending.is_some()
            || matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            return ErrorCode::CONCURRENT_TRANSACTIONS;
        }
        if m.state == TxnState::Ongoing && m.partitions.contains(tp) {
            ErrorCode::NONE
        } else {
            ErrorCode::INVALID_TXN_STATE
        }
    }

    /// An [`Effect::Persist`] finished (`ok`: durably). Unknown writes (of an unloaded
    /// shard) are ignored.
    ///
    /// A failed write of a client's transition is dropped: the durable state stays, the
    /// request gets COORDINATOR_NOT_AVAILABLE (retriable). A failed fence of a timed-out
    /// transaction is dropped too (the next tick tries again). A failed Complete* or
    /// deletion stays pending: the driver retries those until they succeed (and may report
    /// the same write again), the id answering CONCURRENT_TRANSACTIONS meanwhile.
    pub fn written(&mut self, now: Millis, write: WriteId, ok: bool) -> Vec<Effect> {
        let Some(id) = self.writes.remove(&write) else {
            return Vec::new();
        };
        let Some(e) = self.ids.get_mut(&id) else {
            return Vec::new();
        };
        if e.pending.as_ref().map(|p| p.write) != Some(write) {
            return Vec::new();
        }
        let before = e.open();
        let Some(p) = e.pending.take() else {
            return Vec::new();
        };
        let mut effects = Vec::new();
        if !ok {
            if p.retried {
                e.pending = Some(p);
                self.writes.insert(write, id);
                return effects;
            }
            if e.meta.is_none() {
                // The id's first write: it never existed.
                self.ids.remove(&id);
                adjust(&mut self.open, before, false);
            } else {
                adjust(&mut self.open, before, e.open());
                self.note_due(&id);
            }
            if let Some(w) = p.waiting {
                effects.push(Effect::Reply {
                    request: w.request,
                    reply: w.kind.error(ErrorCode::COORDINATOR_NOT_AVAILABLE),
                });
            }
            return effects;
        }
        let Some(target) = p.target else {
            self.ids.remove(&id);
            adjust(&mut self.open, before, false);
            return effects;
        };
        e.meta = Some(target);
        adjust(&mut self.open, before, e.open());
        self.note_due(&id);
        if let Some(w) = p.waiting {
            effects.push(Effect::Reply {
                request: w.request,
                reply: w.ok,
            });
        }
        if p.markers {
            effects.extend(self.start_markers(now, &id));
        }
        effects
    }

    /// Every marker of `job` is written: the transaction completes (the Complete* state is
    /// written; nobody waits for it). Unknown jobs are ignored.
    pub fn markers_done(&mut self, now: Millis, job: JobId) -> Vec<Effect> {
        let Some(id) = self.jobs.remove(&job) else {
            return Vec::new();
        };
        let Some(e) = self.ids.get_mut(&id) else {
            return Vec::new();
        };
        if e.job != Some(job) {
            return Vec::new();
        }
        e.job = None;
        if e.pending.is_some() {
            return Vec::new();
        }
        let Some(m) = e
            .meta
            .as_ref()
            .filter(|m| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
        else {
            return Vec::new();
        };
        let done = completed(m, now);
        self.persist(&id, Some(done), None, false, true)
    }

    /// Timers: aborts Ongoing transactions past their timeout (epoch bump, PrepareAbort,
    /// markers; nobody waits) and deletes ids idle past `id_expiration_ms`.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        self.last_scan = now;
        let mut due: Option<Millis> = None;
        let mut timed_out = Vec::new();
        let mut expired = Vec::new();
        for (id, e) in &self.ids {
            if e.pending.is_some() || e.job.is_some() {
                continue;
            }
            let Some(m) = e.meta.as_ref() else {
                continue;
            };
            let Some(at) = self.due_of(m) else {
                continue;
            };
            if at > now {
                due = Some(due.map_or(at, |d| d.min(at)));
            } else if m.state == TxnState::Ongoing {
                timed_out.push(id.clone());
            } else {
                expired.push(id.clone());
            }
        }
        self.next_due = due;
        let mut effects = Vec::new();
        for id in timed_out {
            effects.extend(self.fence(now, &id, None));
        }
        for id in expired {
            effects.extend(self.persist(&id, None, None, false, true));
        }
        effects
    }

    /// When [`TxnCoordinator::tick`] has something to do next: never sooner than
    /// `abort_check_interval_ms` after the last tick (timeouts are checked at that pace,
    /// as Kafka does), never later than the earliest timer.
    pub fn next_deadline(&self) -> Option<Millis> {
        let due = self.next_due?;
        Some(
            due.max(
                self.last_scan
                    .saturating_add(self.config.abort_check_interval_ms),
            ),
        )
    }

    /// Takes over `shard` with its stored states and the coordinator epoch this process
    /// claimed for it. Ongoing transactions keep their start (a timed-out one is aborted
    /// at the next tick); Prepare* states restart their marker job with the new epoch.
    /// States of other shards and Dead states are skipped; a repeated id keeps the last.
    /// Loading a loaded shard unloads it first.
    pub fn load(
        &mut self,
        now: Millis,
        shard: u32,
        coordinator_epoch: i32,
        states: Vec<TxnMetadata>,
    ) -> Vec<Effect> {
        let mut effects = self.unload(shard);
        self.shards.insert(shard, coordinator_epoch);
        let mut loaded = BTreeSet::new();
        for m in states {
            if m.state == TxnState::Dead || (self.shard_of)(&m.transactional_id) != shard {
                continue;
            }
            let id = m.transactional_id.clone();
            let e = Entry {
                shard,
                meta: Some(m),
                pending: None,
                job: None,
            };
            let open = e.open();
            if let Some(old) = self.ids.insert(id.clone(), e) {
                adjust(&mut self.open, old.open(), false);
            }
            adjust(&mut self.open, false, open);
            self.note_due(&id);
            loaded.insert(id);
        }
        for id in loaded {
            effects.extend(self.start_markers(now, &id));
        }
        effects
    }

    /// Lets go of `shard`: its marker jobs are cancelled, its waiting requests answered
    /// NOT_COORDINATOR, its ids forgotten (writes in flight for them are ignored when
    /// they finish).
    pub fn unload(&mut self, shard: u32) -> Vec<Effect> {
        if self.shards.remove(&shard).is_none() {
            return Vec::new();
        }
        let ids: Vec<String> = self
            .ids
            .iter()
            .filter(|(_, e)| e.shard == shard)
            .map(|(id, _)| id.clone())
            .collect();
        let mut effects = Vec::new();
        for id in ids {
            let Some(e) = self.ids.remove(&id) else {
                continue;
            };
            adjust(&mut self.open, e.open(), false);
            if let Some(p) = e.pending {
                self.writes.remove(&p.write);
                if let Some(w) = p.waiting {
                    effects.push(Effect::Reply {
                        request: w.request,
                        reply: w.kind.error(ErrorCode::NOT_COORDINATOR),
                    });
                }
            }
            if let Some(job) = e.job {
                self.jobs.remove(&job);
                effects.push(Effect::CancelMarkers(job));
            }
        }
        effects
    }

    /// Whether `id` is moving on by itself: a state write in flight, or a transaction
    /// ending (PrepareCommit/PrepareAbort: its markers, then the Complete state). A
    /// request it answers CONCURRENT_TRANSACTIONS meanwhile may succeed once that is
    /// over, which [`TxnCoordinator::written`] and [`TxnCoordinator::markers_done`] for
    /// the id tell.
    pub fn completing(&self, id: &str) -> bool {
        self.ids.get(id).is_some_and(|e| {
            e.pending.is_some()
                || e.meta.as_ref().is_some_and(|m| {
                    matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
                })
        })
    }

    /// The durable state of `id`: NOT_COORDINATOR when its shard is not loaded,
    /// TRANSACTIONAL_ID_NOT_FOUND when it has none.
    pub fn describe(&self, id: &str) -> Result<&TxnMetadata, ErrorCode> {
        if !self.loaded_for(id) {
            return Err(ErrorCode::NOT_COORDINATOR);
        }
        self.ids
            .get(id)
            .and_then(|e| e.meta.as_ref())
            .ok_or(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
    }

    /// Durable states of the loaded shards matching every filter, by id. An empty
    /// `states` or `producer_ids` matches any; `min_duration_ms` (when >= 0) keeps
    /// transactions that started more than that long before `now` (Kafka's rule: a state
    /// without a transaction, start -1, always passes).
    pub fn list(
        &self,
        now: Millis,
        states: &[TxnState],
        producer_ids: &[i64],
        min_duration_ms: i64,
    ) -> Vec<&TxnMetadata> {
        self.ids
            .values()
            .filter_map(|e| e.meta.as_ref())
            .filter(|m| m.state != TxnState::Dead)
            .filter(|m| states.is_empty() || states.contains(&m.state))
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            .filter(|m| min_duration_ms < 0 || now.saturating_sub(m.start_ms) > min_duration_ms)
            .collect()
    }
}

/// The Complete* state that follows `m`'s Prepare* state.
fn completed(m: &TxnMetadata, now: Millis) -> TxnMetadata {
    let mut done = m.clone();
    done.state = if m.state == TxnState::PrepareCommit {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    };
    done.partitions.clear();
    done.last_update_ms = now;
    done
}
