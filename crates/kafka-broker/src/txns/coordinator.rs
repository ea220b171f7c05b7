//! The driver around the sans-IO transaction coordinator ([`kafka_txn::TxnCoordinator`]).
//!
//! One task owns the machine. Handlers send it commands over a bounded channel and await
//! the reply on a oneshot; the task feeds every command in with the wall-clock time
//! (transaction start times are stored and must mean the same after a restart or on
//! another gateway) and sleeps until the machine's next deadline (transaction timeouts,
//! expiry of idle ids). It carries out what the machine asks for:
//!
//! - **Persist**: the new state of one transactional id is written to the offset store
//!   (`put_txn_state`) by a task of its own; the machine hears the outcome through
//!   `written`. A state the client is waiting on (Ongoing, Prepare*) is tried once: a
//!   failure answers the client a retriable code and the transition is dropped. States
//!   the machine reaches by itself (Complete*, Dead, a deletion) are retried with a
//!   doubling backoff until written or the shard moves away.
//! - **WriteMarkers**: one marker task per job writes a commit or abort marker to every
//!   partition of the transaction through the [`TxnRouter`] (in process for partitions
//!   this gateway leads, to the leading gateway otherwise). A partition answering a
//!   retriable code is asked again after a backoff (`marker_retry_min`, doubling up to
//!   `marker_retry_max`), the router choosing the target afresh each time. A partition
//!   that no longer exists (`UNKNOWN_TOPIC_OR_PARTITION`) or that already saw a newer
//!   producer epoch (`INVALID_PRODUCER_EPOCH`) is done. `TRANSACTION_COORDINATOR_FENCED`
//!   stops the job: a coordinator with a newer epoch for the shard wrote there, and
//!   resumes the job from the stored Prepare* state (this gateway's own loss of the
//!   shard cancels the job when the shard is unloaded). `NOT_COORDINATOR` for a group
//!   shard's offsets means that shard is moving: retried like a leader moving. When every partition is done the
//!   machine hears `markers_done` and completes the transaction.
//! - **CancelMarkers**: the job's task is stopped (its shard was unloaded).
//!
//! An AddPartitionsToTxn, AddOffsetsToTxn or InitProducerId the machine answers
//! CONCURRENT_TRANSACTIONS while its id is completing ([`TxnCoordinator::completing`]:
//! the previous transaction's markers, or a state write, in flight) is held back
//! instead, up to `completion_wait`, and fed in again, as the client's retry would be,
//! as soon as a write or marker job of that id settles and the id is no longer
//! completing. A producer that commits and at once starts its next transaction is then
//! answered when the commit is complete, instead of retrying after its own backoff (the
//! Java client waits 20 ms for an add, 100 ms for an InitProducerId, for markers that
//! take a few); so is a new producer whose InitProducerId fences the id's open
//! transaction. Past the wait it is answered CONCURRENT_TRANSACTIONS, as at once before.
//! Held requests are one per connection at most (a connection's next request waits for
//! this one) and are dropped with their connection.
//!
//! Shards are loaded and unloaded by the groups' follower (`crate::groups`), which holds
//! the store's view of the shard: [`Txns::load_shard`] claims a new coordinator epoch,
//! reads and decodes the stored states and hands them to the machine;
//! [`Txns::unload_shard`] lets them go, cancelling their marker jobs and state writes.

use crate::broker::now_ms;
use crate::config::TransactionSettings;
use crate::store::OffsetStore;
use crate::txns::{MarkerWrite, TxnRouter};
use kafka_protocol::ErrorCode;
use kafka_store::StoreResult;
use kafka_store::cluster::group_shard;
use kafka_txn::{
    AddPartitions, Effect, EndTxn, InitProducerId, JobId, MarkerJob, Millis, Reply, RequestId,
    TxnCoordinator, TxnMetadata, TxnState, WriteId,
};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// Commands waiting for the coordinator task at most; senders wait for room beyond.
const COMMAND_QUEUE: usize = 1024;

/// Most markers handed to the router in one call (a transaction may hold many
/// partitions; the rest follow in later calls).
const MARKERS_PER_CALL: usize = 1000;

type Query = Box<dyn FnOnce(&mut TxnCoordinator, Millis) + Send>;

enum Command {
    Init(InitProducerId, oneshot::Sender<Reply>),
    Add(AddPartitions, oneshot::Sender<Reply>),
    End(EndTxn, oneshot::Sender<Reply>),
    Query(Query),
    Load(u32, i32, Vec<TxnMetadata>, oneshot::Sender<()>),
    Unload(u32, oneshot::Sender<()>),
    Written(WriteId, bool),
    MarkersDone(JobId),
}

/// Handle to the transaction coordinator task; cheap to clone.
#[derive(Clone)]
pub(crate) struct Txns {
    pub(crate) settings: TransactionSettings,
    tx: mpsc::Sender<Command>,
    store: Arc<dyn OffsetStore>,
}

impl std::fmt::Debug for Txns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txns")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The coordinator task has stopped (shutdown).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable;

impl Txns {
    /// Starts the coordinator task. No shard is loaded until the groups' follower loads one.
    pub(crate) fn spawn(
        settings: TransactionSettings,
        store: Arc<dyn OffsetStore>,
        router: Arc<dyn TxnRouter>,
    ) -> Txns {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let machine = TxnCoordinator::new(settings.coordinator.clone(), group_shard);
        tokio::spawn(run(
            machine,
            rx,
            tx.downgrade(),
            Arc::clone(&store),
            router,
            settings.clone(),
        ));
        Txns {
            settings,
            tx,
            store,
        }
    }

    async fn ask(
        &self,
        make: impl FnOnce(oneshot::Sender<Reply>) -> Command,
    ) -> Result<Reply, Unavailable> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }

    /// InitProducerId with a transactional id (the request id is set here).
    pub(crate) async fn init_producer_id(
        &self,
        req: InitProducerId,
    ) -> Result<(i64, i16), ErrorCode> {
        match self.ask(|tx| Command::Init(req, tx)).await {
            Ok(Reply::ProducerId(r)) => r,
            Ok(Reply::Code(c)) => Err(c),
            Err(Unavailable) => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: one code for every partition.
    pub(crate) async fn add_partitions(&self, req: AddPartitions) -> ErrorCode {
        code_of(self.ask(|tx| Command::Add(req, tx)).await)
    }

    /// EndTxn.
    pub(crate) async fn end_txn(&self, req: EndTxn) -> ErrorCode {
        code_of(self.ask(|tx| Command::End(req, tx)).await)
    }

    /// Runs `f` on the machine (describe, list, verify).
    pub(crate) async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut TxnCoordinator, Millis) -> R + Send + 'static,
    ) -> Result<R, Unavailable> {
        let (tx, rx) = oneshot::channel();
        let q: Query = Box::new(move |c, now| {
            let _ = tx.send(f(c, now));
        });
        self.tx
            .send(Command::Query(q))
            .await
            .map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }

    /// Whether `topic`/`partition` is in the ongoing transaction of `transactional_id`
    /// with this producer id and epoch (KIP-890 verification). `NOT_COORDINATOR` when
    /// the id's shard is not loaded here.
    pub(crate) async fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> ErrorCode {
        let id = transactional_id.to_owned();
        let tp = (topic.to_owned(), partition);
        self.with(move |c, _| c.verify(&id, producer_id, producer_epoch, &tp))
            .await
            .unwrap_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    }

    /// Loads the transactional ids of `shard` (the shard is acquired): claims a new
    /// coordinator epoch, reads the stored states and hands them to the machine, which
    /// resumes Prepare* transactions. A state that does not decode is left out with one
    /// warning per shard.
    pub(crate) async fn load_shard(&self, shard: u32) -> StoreResult<()> {
        let epoch = self.store.claim_txn_epoch(shard).await?;
        let stored = self.store.txn_states(shard).await?;
        let total = stored.len();
        let mut states = Vec::with_capacity(total);
        let mut bad = 0usize;
        for (id, blob) in stored {
            match kafka_txn::snapshot::decode(&blob) {
                Ok(m) if m.transactional_id == id && group_shard(&id) == shard => states.push(m),
                _ => bad += 1,
            }
        }
        if bad > 0 {
            tracing::warn!(
                shard,
                states = bad,
                "stored transaction states that do not decode were left out"
            );
        }
        let (done, wait) = oneshot::channel();
        if self
            .tx
            .send(Command::Load(shard, epoch, states, done))
            .await
            .is_ok()
        {
            let _ = wait.await;
        }
        if total > 0 {
            tracing::info!(
                shard,
                coordinator_epoch = epoch,
                ids = total - bad,
                "transaction states loaded"
            );
        }
        Ok(())
    }

    /// Lets go of the transactional ids of `shard`: waiting requests get
    /// `NOT_COORDINATOR`, its marker jobs and state writes stop.
    pub(crate) async fn unload_shard(&self, shard: u32) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Unload(shard, done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

fn code_of(reply: Result<Reply, Unavailable>) -> ErrorCode {
    match reply {
        Ok(Reply::Code(c)) => c,
        Ok(Reply::ProducerId(Ok(_))) => ErrorCode::NONE,
        Ok(Reply::ProducerId(Err(c))) => c,
        Err(Unavailable) => ErrorCode::COORDINATOR_NOT_AVAILABLE,
    }
}

/// Whether a state is one the machine reached by itself (nobody waits on its write), so
/// its write is retried until it lands.
fn retried(state: Option<&TxnMetadata>) -> bool {
    state.is_none_or(|m| {
        matches!(
            m.state,
            TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Dead
        )
    })
}

/// What runs in the background for one shard, stopped when it is unloaded.
#[derive(Default)]
struct Background {
    /// Marker jobs: job -> (transactional id, task).
    jobs: HashMap<JobId, (String, AbortHandle)>,
    /// State writes: write -> (transactional id, task); the id's shard is
    /// `group_shard(id)`.
    writes: HashMap<WriteId, (String, AbortHandle)>,
}

/// A request that may be held while its transactional id completes, as the machine got
/// it: fed in again, it is what the client's own retry would send.
#[derive(Clone)]
enum Retry {
    /// AddPartitionsToTxn / AddOffsetsToTxn.
    Add(AddPartitions),
    /// InitProducerId (a new producer fencing the id's open transaction, or one that
    /// finds it ending).
    Init(InitProducerId),
}

impl Retry {
    fn id(&self) -> &str {
        match self {
            Retry::Add(a) => &a.transactional_id,
            Retry::Init(i) => &i.transactional_id,
        }
    }

    fn feed(self, machine: &mut TxnCoordinator, now: Millis) -> Vec<Effect> {
        match self {
            Retry::Add(a) => machine.add_partitions(now, a),
            Retry::Init(i) => machine.init_producer_id(now, i),
        }
    }

    /// CONCURRENT_TRANSACTIONS as this request is answered it.
    fn concurrent(&self) -> Reply {
        match self {
            Retry::Add(_) => Reply::Code(ErrorCode::CONCURRENT_TRANSACTIONS),
            Retry::Init(_) => Reply::ProducerId(Err(ErrorCode::CONCURRENT_TRANSACTIONS)),
        }
    }
}

/// Requests that wait for their transactional id to complete instead of being answered
/// CONCURRENT_TRANSACTIONS at once (`completion_wait`).
#[derive(Default)]
struct Held {
    /// Every such request not answered yet: as fed in, and until when it may wait.
    open: HashMap<RequestId, (Retry, Instant)>,
    /// Requests answered CONCURRENT_TRANSACTIONS while their id was completing, by id.
    parked: HashMap<String, Vec<RequestId>>,
    /// The same, by deadline.
    deadlines: BTreeSet<(Instant, RequestId)>,
}

impl Held {
    /// Keeps `request` (fed in as `retry`) so that it can be held, when waiting is on.
    fn track(&mut self, request: RequestId, retry: Retry, wait: Duration) {
        if !wait.is_zero() {
            self.open.insert(request, (retry, Instant::now() + wait));
        }
    }

    /// Whether the machine's `reply` to `request` is held back: CONCURRENT_TRANSACTIONS
    /// while its id is completing, before its deadline.
    fn park(&mut self, machine: &TxnCoordinator, request: RequestId, reply: &Reply) -> bool {
        let Some((retry, deadline)) = self.open.get(&request) else {
            return false;
        };
        let concurrent = match reply {
            Reply::Code(c) | Reply::ProducerId(Err(c)) => *c == ErrorCode::CONCURRENT_TRANSACTIONS,
            Reply::ProducerId(Ok(_)) => false,
        };
        if !(concurrent && Instant::now() < *deadline && machine.completing(retry.id())) {
            self.open.remove(&request);
            return false;
        }
        self.parked
            .entry(retry.id().to_owned())
            .or_default()
            .push(request);
        self.deadlines.insert((*deadline, request));
        true
    }

    /// The parked requests of `id` to feed in again, once it is no longer completing.
    fn ready(&mut self, machine: &TxnCoordinator, id: &str) -> Vec<Retry> {
        if machine.completing(id) {
            return Vec::new();
        }
        let Some(requests) = self.parked.remove(id) else {
            return Vec::new();
        };
        requests
            .into_iter()
            .filter_map(|r| {
                let (retry, deadline) = self.open.get(&r)?;
                self.deadlines.remove(&(*deadline, r));
                Some(retry.clone())
            })
            .collect()
    }

    /// Parked requests past their deadline, removed, with the CONCURRENT_TRANSACTIONS
    /// they are answered.
    fn expired(&mut self, now: Instant) -> Vec<(RequestId, Reply)> {
        let mut out = Vec::new();
        while let Some(&(deadline, request)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let Some((retry, _)) = self.open.remove(&request) else {
                continue;
            };
            if let Some(parked) = self.parked.get_mut(retry.id()) {
                parked.retain(|r| *r != request);
                if parked.is_empty() {
                    self.parked.remove(retry.id());
                }
            }
            out.push((request, retry.concurrent()));
        }
        out
    }

    /// The first deadline of a parked request.
    fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Forgets the requests nobody waits for any more (their connection is gone).
    fn retain(&mut self, waiting: &HashMap<RequestId, oneshot::Sender<Reply>>) {
        self.open.retain(|r, _| waiting.contains_key(r));
        self.deadlines.retain(|(_, r)| waiting.contains_key(r));
        self.parked.retain(|_, rs| {
            rs.retain(|r| waiting.contains_key(r));
            !rs.is_empty()
        });
    }
}

async fn run(
    mut machine: TxnCoordinator,
    mut rx: mpsc::Receiver<Command>,
    me: mpsc::WeakSender<Command>,
    store: Arc<dyn OffsetStore>,
    router: Arc<dyn TxnRouter>,
    settings: TransactionSettings,
) {
    let mut next_id = 0u64;
    let mut waiting: HashMap<RequestId, oneshot::Sender<Reply>> = HashMap::new();
    let mut background = Background::default();
    let mut held = Held::default();
    // Commands since the last sweep of replies nobody waits for.
    let mut unswept = 0usize;
    loop {
        let sleep = machine.next_deadline().map(|at| {
            let wait = at.saturating_sub(now_ms()).max(0);
            Duration::from_millis(u64::try_from(wait).unwrap_or(0))
        });
        let sleep = match (sleep, held.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b.saturating_duration_since(Instant::now()))),
            (a, b) => a.or_else(|| b.map(|b| b.saturating_duration_since(Instant::now()))),
        };
        let command = tokio::select! {
            c = rx.recv() => match c {
                Some(c) => Some(c),
                None => break,
            },
            () = sleep_for(sleep) => None,
        };
        let now = now_ms();
        let mut request = |tx: oneshot::Sender<Reply>| {
            next_id += 1;
            let id = RequestId(next_id);
            waiting.insert(id, tx);
            id
        };
        // The id whose state or marker job just settled: its parked requests go in again.
        let mut settled: Option<String> = None;
        let mut effects = match command {
            None => machine.tick(now),
            Some(Command::Init(mut r, tx)) => {
                r.request = request(tx);
                held.track(r.request, Retry::Init(r.clone()), settings.completion_wait);
                machine.init_producer_id(now, r)
            }
            Some(Command::Add(mut r, tx)) => {
                r.request = request(tx);
                held.track(r.request, Retry::Add(r.clone()), settings.completion_wait);
                machine.add_partitions(now, r)
            }
            Some(Command::End(mut r, tx)) => {
                r.request = request(tx);
                machine.end_txn(now, r)
            }
            Some(Command::Query(q)) => {
                q(&mut machine, now);
                Vec::new()
            }
            Some(Command::Load(shard, epoch, states, done)) => {
                let effects = machine.load(now, shard, epoch, states);
                let _ = done.send(());
                effects
            }
            Some(Command::Unload(shard, done)) => {
                let effects = machine.unload(shard);
                background.writes.retain(|_, (id, task)| {
                    let keep = group_shard(id) != shard;
                    if !keep {
                        task.abort();
                    }
                    keep
                });
                let _ = done.send(());
                effects
            }
            Some(Command::Written(write, ok)) => {
                settled = background.writes.remove(&write).map(|(id, _)| id);
                machine.written(now, write, ok)
            }
            Some(Command::MarkersDone(job)) => {
                settled = background.jobs.remove(&job).map(|(id, _)| id);
                machine.markers_done(now, job)
            }
        };
        for (request, reply) in held.expired(Instant::now()) {
            if let Some(tx) = waiting.remove(&request) {
                let _ = tx.send(reply);
            }
        }
        loop {
            for effect in std::mem::take(&mut effects) {
                match effect {
                    Effect::Reply { request, reply } => {
                        if held.park(&machine, request, &reply) {
                            continue;
                        }
                        if let Some(tx) = waiting.remove(&request) {
                            // The connection may be gone; the machine's state is what matters.
                            let _ = tx.send(reply);
                        }
                    }
                    Effect::Persist {
                        write,
                        transactional_id,
                        state,
                    } => {
                        let task = tokio::spawn(persist(
                            write,
                            transactional_id.clone(),
                            state,
                            Arc::clone(&store),
                            me.clone(),
                            settings.clone(),
                        ));
                        background
                            .writes
                            .insert(write, (transactional_id, task.abort_handle()));
                    }
                    Effect::WriteMarkers(job) => {
                        let id = job.job;
                        let txn_id = job.transactional_id.clone();
                        let task = tokio::spawn(write_markers(
                            job,
                            Arc::clone(&router),
                            me.clone(),
                            settings.clone(),
                        ));
                        if let Some((_, old)) =
                            background.jobs.insert(id, (txn_id, task.abort_handle()))
                        {
                            old.abort();
                        }
                    }
                    Effect::CancelMarkers(job) => {
                        if let Some((_, task)) = background.jobs.remove(&job) {
                            task.abort();
                        }
                    }
                }
            }
            // Once the id is no longer completing, its parked requests are fed in again
            // (their answers may park them again, or open the next transaction).
            let Some(id) = settled.take() else { break };
            for retry in held.ready(&machine, &id) {
                effects.extend(retry.feed(&mut machine, now));
            }
            if effects.is_empty() {
                break;
            }
        }
        // Replies whose request the machine dropped (its connection is gone or the
        // machine answered through another path) are not kept. Swept once per as many
        // commands as there are replies waiting, so held requests cost each command O(1).
        unswept += 1;
        if unswept >= waiting.len().max(64) {
            unswept = 0;
            let before = waiting.len();
            waiting.retain(|_, tx| !tx.is_closed());
            if waiting.len() < before {
                held.retain(&waiting);
            }
        }
    }
    for (_, task) in background.jobs.into_values() {
        task.abort();
    }
    for (_, task) in background.writes.into_values() {
        task.abort();
    }
}

async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Writes one state; retried with backoff when nobody waits on it.
async fn persist(
    write: WriteId,
    id: String,
    state: Option<TxnMetadata>,
    store: Arc<dyn OffsetStore>,
    me: mpsc::WeakSender<Command>,
    settings: TransactionSettings,
) {
    let blob = state.as_ref().map(kafka_txn::snapshot::encode);
    let again = retried(state.as_ref());
    let mut backoff = settings.marker_retry_min;
    let mut failures = 0u32;
    let ok = loop {
        match store.put_txn_state(&id, blob.clone()).await {
            Ok(()) => break true,
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(transactional_id = %id, error = %e, "cannot write a transaction state");
                }
                failures = failures.saturating_add(1);
                if !again || me.upgrade().is_none() {
                    break false;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(settings.marker_retry_max);
            }
        }
    };
    if failures > 0 && ok {
        tracing::info!(transactional_id = %id, failures, "transaction state written after retries");
    }
    if let Some(tx) = me.upgrade() {
        let _ = tx.send(Command::Written(write, ok)).await;
    }
}

/// What a marker's answer means for its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerOutcome {
    /// Written, or nothing to write there any more.
    Done,
    /// Ask again later.
    Retry,
    /// This gateway no longer coordinates the transaction: stop the job.
    Fenced,
}

fn marker_outcome(code: ErrorCode) -> MarkerOutcome {
    if code == ErrorCode::NONE
        || code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        || code == ErrorCode::INVALID_PRODUCER_EPOCH
    {
        MarkerOutcome::Done
    } else if code == ErrorCode::TRANSACTION_COORDINATOR_FENCED {
        MarkerOutcome::Fenced
    } else {
        MarkerOutcome::Retry
    }
}

/// Writes the markers of one job until every partition is done (then tells the machine)
/// or the job is fenced.
async fn write_markers(
    job: MarkerJob,
    router: Arc<dyn TxnRouter>,
    me: mpsc::WeakSender<Command>,
    settings: TransactionSettings,
) {
    let mut left: Vec<MarkerWrite> = job
        .partitions
        .iter()
        .map(|(topic, partition)| MarkerWrite {
            topic: topic.clone(),
            partition: *partition,
            producer_id: job.producer_id,
            producer_epoch: job.producer_epoch,
            coordinator_epoch: job.coordinator_epoch,
            commit: job.commit,
        })
        .collect();
    let mut backoff = settings.marker_retry_min;
    let mut retries = 0u64;
    while !left.is_empty() {
        let mut retry = Vec::new();
        for chunk in left.chunks(MARKERS_PER_CALL) {
            let codes = router.write_markers(chunk.to_vec()).await;
            for (i, m) in chunk.iter().enumerate() {
                // A short answer counts the missing ones as retriable.
                let code = codes
                    .get(i)
                    .copied()
                    .unwrap_or(ErrorCode::NOT_LEADER_OR_FOLLOWER);
                match marker_outcome(code) {
                    MarkerOutcome::Done => {}
                    MarkerOutcome::Retry => retry.push(m.clone()),
                    MarkerOutcome::Fenced => {
                        tracing::info!(
                            transactional_id = %job.transactional_id,
                            coordinator_epoch = job.coordinator_epoch,
                            code = ?code,
                            "transaction markers stopped: another coordinator took over"
                        );
                        return;
                    }
                }
            }
        }
        if retry.is_empty() {
            break;
        }
        if retries == 0 {
            tracing::debug!(
                transactional_id = %job.transactional_id,
                partitions = retry.len(),
                "transaction markers not written yet; retrying"
            );
        }
        retries = retries.saturating_add(1);
        left = retry;
        if me.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(settings.marker_retry_max);
    }
    if let Some(tx) = me.upgrade() {
        let _ = tx.send(Command::MarkersDone(job.job)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_codes_decide_the_partition() {
        assert_eq!(marker_outcome(ErrorCode::NONE), MarkerOutcome::Done);
        assert_eq!(
            marker_outcome(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            MarkerOutcome::Done
        );
        assert_eq!(
            marker_outcome(ErrorCode::INVALID_PRODUCER_EPOCH),
            MarkerOutcome::Done
        );
        assert_eq!(
            marker_outcome(ErrorCode::NOT_LEADER_OR_FOLLOWER),
            MarkerOutcome::Retry
        );
        assert_eq!(
            marker_outcome(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            MarkerOutcome::Retry
        );
        assert_eq!(
            marker_outcome(ErrorCode::TRANSACTION_COORDINATOR_FENCED),
            MarkerOutcome::Fenced
        );
        // A group shard moving between gateways: its next coordinator takes the marker.
        assert_eq!(
            marker_outcome(ErrorCode::NOT_COORDINATOR),
            MarkerOutcome::Retry
        );
    }

    #[test]
    fn only_states_nobody_waits_on_are_retried() {
        let mut m = TxnMetadata {
            transactional_id: "t".into(),
            producer_id: 1,
            last_producer_id: -1,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms: 1000,
            state: TxnState::Ongoing,
            partitions: Default::default(),
            start_ms: 0,
            last_update_ms: 0,
        };
        assert!(!retried(Some(&m)));
        m.state = TxnState::PrepareCommit;
        assert!(!retried(Some(&m)));
        m.state = TxnState::CompleteAbort;
        assert!(retried(Some(&m)));
        assert!(retried(None));
    }
}
