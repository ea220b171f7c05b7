//! The driver around the sans-IO group coordinator ([`kafka_groups::Coordinator`]).
//!
//! One task owns the coordinator. Handlers send it commands over a bounded channel; the
//! task feeds them in with the current time, sleeps until the coordinator's next deadline
//! (session expiries, rebalance timeouts, the initial rebalance delay) and routes every
//! answer the coordinator releases back to the waiting handler. JoinGroup and SyncGroup
//! answers may come much later than their requests: the handler simply awaits them.
//!
//! # Coordinator shards
//!
//! Every group lives in one of [`GROUP_SHARDS`] shards
//! ([`kafka_store::cluster::group_shard`]), and the live view places each shard on one
//! gateway ([`crate::cluster`]). A follower task watches the membership (its view
//! changes, and a re-check every [`GroupStateSettings::recheck_interval`] for the lease):
//!
//! - a shard this gateway newly coordinates is *loaded*: `acquire_shard` (the store makes
//!   what other gateways wrote to it current), `group_states` (each blob decoded and
//!   restored into the coordinator: the group is back Stable or Empty in its generation,
//!   its members' sessions restarting now), then the shard is marked loaded. A failed
//!   acquire or read is retried with a doubling backoff
//!   ([`GroupStateSettings::load_retry_min`] to [`GroupStateSettings::load_retry_max`]).
//!   A blob that does not decode or restore leaves that group to start empty (its
//!   committed offsets are still there), with one warning per group.
//! - a shard lost is *unloaded*: its groups leave the coordinator (parked JoinGroup and
//!   SyncGroup requests get `NOT_COORDINATOR`), its unwritten states are dropped, and the
//!   store is told (`release_shard`).
//!
//! The coordinator task keeps the set of loaded shards. A group request for a shard this
//! gateway coordinates but has not loaded yet waits for the load up to
//! [`GroupStateSettings::load_wait`], then answers `COORDINATOR_LOAD_IN_PROGRESS`
//! (retriable: the client backs off and retries), except where Kafka's coordinator answers
//! otherwise while loading: Heartbeat gets `NONE` and SyncGroup `REBALANCE_IN_PROGRESS`
//! (see `not_loaded`). Requests for a shard another gateway coordinates are refused before
//! they get here (`NOT_COORDINATOR`).
//!
//! # Writing group states
//!
//! When a group's durable state changes (a generation becomes Stable, the group becomes
//! Empty, a static member is replaced, the group is deleted or evicted), the coordinator
//! task hands the new state to its shard's writer without waiting. Each shard has one
//! writer task and a queue holding at most one state per group: a newer state of a group
//! replaces an unwritten older one, so the queue is bounded by the groups of the shard
//! and a group's states are written in order (last write wins in the store). A failed
//! write is retried with the same backoff as loads, unless a newer state of that group
//! arrived meanwhile. What a crash loses: the states still queued (in practice the last
//! few milliseconds of changes); a group whose latest state was lost is restored one
//! generation back, and its members, finding their generation unknown, rejoin once.
//!
//! # Transactions
//!
//! A transactional id lives in the shard of its name, like a group, so the follower
//! loads both sides of a shard before marking it loaded: after the groups' states it
//! hands the shard to the transaction coordinator ([`crate::txns::coordinator::Txns`]:
//! a new coordinator epoch, the stored transaction states) and reads the offsets that
//! open transactions committed to the shard's groups (TxnOffsetCommit). Those *pending*
//! offsets are kept here per group and producer id: they are invisible to OffsetFetch
//! (which answers `UNSTABLE_OFFSET_COMMIT` for them when asked for stable offsets) until
//! the transaction's marker for the shard arrives ([`Groups::complete_txn_offsets`]):
//! a commit makes them the group's committed offsets in one store write, an abort drops
//! them. A lost shard is let go of in the reverse order: transactions first, then the
//! pending offsets, then the store's hold on the shard.
//!
//! # Committed offsets
//!
//! Committed offsets are kept here too, in the sense of their lifetime: every group with
//! offsets has a last-activity time (its last commit, or the last sweep that found it with
//! members). A sweep, every quarter of the retention (at most every 10 minutes), deletes
//! the offsets of groups inactive for longer than `offsets_retention` (Kafka's
//! `offsets.retention.minutes`), and the number of such groups is capped
//! (`max_groups_with_offsets`): a commit for a group beyond it is refused. The sweep covers
//! the groups of the shards this gateway has loaded only (each shard's owner sweeps it);
//! it learns of groups whose offsets were stored before a restart from the store itself,
//! so they start their retention when the gateway starts.

use crate::cluster::Route;
use crate::config::GroupStateSettings;
use crate::store::{CommittedOffset, OffsetStore};
use crate::txns::coordinator::Txns;
use kafka_groups::{
    Coordinator, GroupConfig, GroupSnapshot, Heartbeat, HeartbeatResponse, JoinGroup, JoinResponse,
    LeaveGroup, LeaveResponse, Millis, RequestId, Response, StateError, SyncGroup, SyncResponse,
};
use kafka_protocol::ErrorCode;
use kafka_store::cluster::{GROUP_SHARDS, Membership, group_shard};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

/// A set of coordinator shards: bit `s` for shard `s`.
pub(crate) type ShardSet = u32;

/// Every shard.
const ALL_SHARDS: ShardSet = if GROUP_SHARDS >= 32 {
    u32::MAX
} else {
    (1 << GROUP_SHARDS) - 1
};

fn bit(shard: u32) -> ShardSet {
    1u32.checked_shl(shard).unwrap_or(0)
}

type Query = Box<dyn FnOnce(&mut Coordinator, Millis, ShardSet) + Send>;

/// A shard's stored states, decoded (or why not), to restore.
type Loaded = Vec<(String, Result<GroupSnapshot, StateError>)>;

enum Command {
    Join(JoinGroup, oneshot::Sender<Response>),
    Sync(SyncGroup, oneshot::Sender<Response>),
    Heartbeat(Heartbeat, oneshot::Sender<Response>),
    Leave(LeaveGroup, oneshot::Sender<Response>),
    Query(Query),
    /// Restore a shard's groups and mark it loaded; answers how many were restored.
    Restore(u32, Loaded, oneshot::Sender<usize>),
    /// Let go of the groups of these shards and mark them not loaded.
    Unload(ShardSet, oneshot::Sender<()>),
}

/// Handle to the coordinator task; cheap to clone.
#[derive(Clone)]
pub(crate) struct Groups {
    tx: mpsc::Sender<Command>,
    offsets: Arc<OffsetGroups>,
    /// The shards loaded, as the coordinator task last published them.
    loaded: watch::Receiver<ShardSet>,
    writers: Arc<Writers>,
    store: Arc<dyn OffsetStore>,
    settings: GroupStateSettings,
    /// The task following the membership, if one was started.
    follower: Arc<Mutex<Option<AbortHandle>>>,
    /// The transaction coordinator, loaded and unloaded with the shards.
    txns: Arc<OnceLock<Txns>>,
    /// Offsets committed inside open transactions.
    pending: Arc<PendingTxnOffsets>,
}

/// Offsets of one group and producer id waiting for their transaction to end.
pub(crate) type PendingSet = Vec<(String, i32, CommittedOffset)>;

/// Offsets committed inside open transactions (TxnOffsetCommit), per group and producer
/// id, for the shards loaded here. Each set holds at most one offset per partition of
/// an existing topic, and only groups admitted under `max_groups_with_offsets` have one.
#[derive(Debug, Default)]
struct PendingTxnOffsets {
    sets: Mutex<HashMap<String, HashMap<i64, PendingSet>>>,
    /// Serializes the store writes of one group's sets (striped by group), so a set is
    /// stored in the order it was merged.
    stripes: [tokio::sync::Mutex<()>; PENDING_STRIPES],
    /// Per coordinator shard: a TxnOffsetCommit holds it shared from its verification to
    /// its pending set being stored, a transaction's completion holds it exclusively. So
    /// offsets verified in a transaction are pending before that transaction's marker
    /// completes the shard, and a commit arriving after the marker is verified again
    /// (and refused: its transaction is no longer ongoing). Without it, a commit verified
    /// just before the marker would be stored after it and stay pending for good.
    gates: [tokio::sync::RwLock<()>; GROUP_SHARDS as usize],
}

const PENDING_STRIPES: usize = 16;

impl PendingTxnOffsets {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<i64, PendingSet>>> {
        // Plain values: a panic while held leaves nothing half-done.
        self.sets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stripe(&self, group: &str) -> &tokio::sync::Mutex<()> {
        let i = crate::cluster::weight(0, group.as_bytes()) as usize % PENDING_STRIPES;
        &self.stripes[i]
    }
}
/// How long committed offsets live and how many groups may have them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetRetention {
    /// Offsets of a group inactive this long are deleted.
    pub(crate) retention: Duration,
    /// Groups with committed offsets at most.
    pub(crate) max_groups: usize,
}

/// The groups that have committed offsets, each with its last activity (Unix ms).
#[derive(Debug)]
struct OffsetGroups {
    rules: OffsetRetention,
    active: Mutex<HashMap<String, i64>>,
}

impl OffsetGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        // The map holds plain values; a panic while it was held leaves nothing half-done.
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a commit for `group` at `now`; `false` if it would be one group too many.
    fn admit(&self, group: &str, now: i64) -> bool {
        let mut active = self.lock();
        if let Some(at) = active.get_mut(group) {
            *at = (*at).max(now);
            return true;
        }
        if active.len() >= self.rules.max_groups {
            return false;
        }
        active.insert(group.to_owned(), now);
        true
    }

    /// One pass of retention over `stored` (the groups the store has offsets for):
    /// refreshes groups with members, forgets groups without offsets and returns the
    /// groups whose offsets are due for deletion.
    fn due(&self, stored: Vec<String>, with_members: &HashSet<String>, now: i64) -> Vec<String> {
        let retention = i64::try_from(self.rules.retention.as_millis()).unwrap_or(i64::MAX);
        let mut active = self.lock();
        let stored: HashSet<String> = stored.into_iter().collect();
        active.retain(|g, _| stored.contains(g));
        let mut due = Vec::new();
        for g in stored {
            active.entry(g).or_insert(now);
        }
        for (g, at) in active.iter_mut() {
            if with_members.contains(g) {
                *at = (*at).max(now);
            } else if now.saturating_sub(*at) >= retention {
                due.push(g.clone());
            }
        }
        due
    }

    /// Forgets `group` if it is still inactive since before `cutoff`; `true` if forgotten
    /// (its offsets may then be deleted).
    fn forget_if_idle(&self, group: &str, cutoff: i64) -> bool {
        let mut active = self.lock();
        match active.get(group) {
            Some(at) if *at <= cutoff => {
                active.remove(group);
                true
            }
            _ => false,
        }
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("loaded", &*self.loaded.borrow())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The coordinator task has stopped (shutdown).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable;

impl Groups {
    /// Starts the coordinator task and the offset retention sweep on the current runtime.
    /// No shard is loaded until [`Groups::follow`] is given the membership.
    pub(crate) fn spawn(
        config: GroupConfig,
        rules: OffsetRetention,
        store: Arc<dyn OffsetStore>,
        settings: GroupStateSettings,
    ) -> Groups {
        let (tx, rx) = mpsc::channel(1024);
        let (loaded_tx, loaded) = watch::channel(0);
        let writers = Arc::new(Writers::new(Arc::clone(&store), settings.clone()));
        tokio::spawn(run(
            Coordinator::new(config),
            rx,
            loaded_tx,
            Arc::clone(&writers),
        ));
        let offsets = Arc::new(OffsetGroups {
            rules,
            active: Mutex::new(HashMap::new()),
        });
        tokio::spawn(sweep_offsets(
            tx.downgrade(),
            Arc::downgrade(&offsets),
            Arc::clone(&store),
        ));
        Groups {
            tx,
            offsets,
            loaded,
            writers,
            store,
            settings,
            follower: Arc::default(),
            txns: Arc::default(),
            pending: Arc::default(),
        }
    }

    /// Has the follower load and unload the transaction coordinator with the shards
    /// (set once, before [`Groups::follow`]).
    pub(crate) fn attach_txns(&self, txns: Txns) {
        let _ = self.txns.set(txns);
    }

    /// The partitions of `group` with offsets pending in an open transaction.
    pub(crate) fn pending_partitions(&self, group: &str) -> HashSet<(String, i32)> {
        self.pending
            .lock()
            .get(group)
            .map_or_else(HashSet::new, |by_pid| {
                by_pid
                    .values()
                    .flatten()
                    .map(|(t, p, _)| (t.clone(), *p))
                    .collect()
            })
    }

    /// Adds `offsets` to the pending set of `group` and `producer_id` (a partition's
    /// newer offset replaces its older one) and stores the whole set, awaited.
    pub(crate) async fn add_pending_offsets(
        &self,
        group: &str,
        producer_id: i64,
        offsets: PendingSet,
    ) -> Result<(), ErrorCode> {
        let _order = self.pending.stripe(group).lock().await;
        let merged = {
            let sets = self.pending.lock();
            let mut merged: BTreeMap<(String, i32), CommittedOffset> = sets
                .get(group)
                .and_then(|by_pid| by_pid.get(&producer_id))
                .into_iter()
                .flatten()
                .map(|(t, p, o)| ((t.clone(), *p), o.clone()))
                .collect();
            for (t, p, o) in offsets {
                merged.insert((t, p), o);
            }
            merged
                .into_iter()
                .map(|((t, p), o)| (t, p, o))
                .collect::<PendingSet>()
        };
        self.store
            .put_pending_offsets(group, producer_id, merged.clone())
            .await
            .map_err(|e| e.error_code())?;
        if self.is_loaded(group) {
            self.pending
                .lock()
                .entry(group.to_owned())
                .or_default()
                .insert(producer_id, merged);
        }
        Ok(())
    }

    /// Holds back the completion of transactions in `group`'s shard while a
    /// TxnOffsetCommit is verified and stored (see `PendingTxnOffsets::gates`).
    pub(crate) async fn txn_commit_gate(
        &self,
        group: &str,
    ) -> tokio::sync::RwLockReadGuard<'_, ()> {
        let shard = group_shard(group) as usize % self.pending.gates.len();
        self.pending.gates[shard].read().await
    }

    /// The "marker" of a transaction for a group shard: the offsets `producer_id`
    /// committed to the groups of `shard` inside its transaction become the groups'
    /// committed offsets (`commit`) or are dropped. Idempotent: nothing pending answers
    /// `NONE`. `NOT_COORDINATOR` when the shard is not loaded here.
    pub(crate) async fn complete_txn_offsets(
        &self,
        shard: u32,
        producer_id: i64,
        commit: bool,
    ) -> ErrorCode {
        if *self.loaded.borrow() & bit(shard) == 0 {
            return ErrorCode::NOT_COORDINATOR;
        }
        let Some(gate) = self.pending.gates.get(shard as usize) else {
            return ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        };
        let _gate = gate.write().await;
        let groups: Vec<String> = self
            .pending
            .lock()
            .iter()
            .filter(|(g, by_pid)| group_shard(g) == shard && by_pid.contains_key(&producer_id))
            .map(|(g, _)| g.clone())
            .collect();
        for group in groups {
            let _order = self.pending.stripe(&group).lock().await;
            if let Err(e) = self
                .store
                .complete_pending_offsets(&group, producer_id, commit)
                .await
            {
                tracing::debug!(group = %group, error = %e, "pending transaction offsets not completed yet");
                return e.error_code();
            }
            let mut sets = self.pending.lock();
            if let Some(by_pid) = sets.get_mut(&group) {
                by_pid.remove(&producer_id);
                if by_pid.is_empty() {
                    sets.remove(&group);
                }
            }
            drop(sets);
            if commit {
                // The committed offsets start (or restart) the group's retention.
                let _ = self.offsets.admit(&group, crate::broker::now_ms());
            }
        }
        ErrorCode::NONE
    }

    /// Loads and unloads shards as `membership` places them on this gateway, from now on
    /// (replacing an earlier membership: what it loaded is unloaded first).
    pub(crate) fn follow(&self, membership: Arc<dyn Membership>) {
        let task = tokio::spawn(follow(
            membership,
            self.tx.downgrade(),
            Arc::clone(&self.store),
            Arc::clone(&self.writers),
            self.settings.clone(),
            TxnSide {
                txns: Arc::clone(&self.txns),
                pending: Arc::clone(&self.pending),
            },
        ));
        let previous = self
            .follower
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(task.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
    }

    /// Admits a commit for `group` at `now` (Unix ms) under `max_groups_with_offsets`
    /// and restarts its retention; `false`: refuse the commit.
    pub(crate) fn admit_commit(&self, group: &str, now: i64) -> bool {
        self.offsets.admit(group, now)
    }

    /// Waits (at most `load_wait`) until the shard of `group` is loaded.
    async fn wait_loaded(&self, group: &str) {
        self.wait_shards(bit(group_shard(group))).await;
    }

    /// Waits (at most `load_wait`) until every shard of `want` is loaded.
    pub(crate) async fn wait_shards(&self, want: ShardSet) {
        let mut loaded = self.loaded.clone();
        if *loaded.borrow_and_update() & want == want || self.settings.load_wait.is_zero() {
            return;
        }
        let _ = tokio::time::timeout(
            self.settings.load_wait,
            loaded.wait_for(|set| set & want == want),
        )
        .await;
    }

    /// Whether every shard of `route` (those this gateway coordinates) is loaded,
    /// waiting for them at most `load_wait`.
    pub(crate) async fn loaded_all(&self, route: &Route) -> bool {
        let owned = route.shards();
        self.wait_shards(owned).await;
        *self.loaded.borrow() & owned == owned
    }

    /// Whether the shard of `group` is loaded now.
    pub(crate) fn is_loaded(&self, group: &str) -> bool {
        *self.loaded.borrow() & bit(group_shard(group)) != 0
    }

    async fn call(
        &self,
        group: &str,
        make: impl FnOnce(oneshot::Sender<Response>) -> Command,
    ) -> Result<Response, Unavailable> {
        self.wait_loaded(group).await;
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }

    pub(crate) async fn join(&self, req: JoinGroup) -> Result<Response, Unavailable> {
        let group = req.group_id.clone();
        self.call(&group, |tx| Command::Join(req, tx)).await
    }

    pub(crate) async fn sync(&self, req: SyncGroup) -> Result<Response, Unavailable> {
        let group = req.group_id.clone();
        self.call(&group, |tx| Command::Sync(req, tx)).await
    }

    pub(crate) async fn heartbeat(&self, req: Heartbeat) -> Result<Response, Unavailable> {
        let group = req.group_id.clone();
        self.call(&group, |tx| Command::Heartbeat(req, tx)).await
    }

    pub(crate) async fn leave(&self, req: LeaveGroup) -> Result<Response, Unavailable> {
        let group = req.group_id.clone();
        self.call(&group, |tx| Command::Leave(req, tx)).await
    }

    /// Runs `f` on the coordinator (describe, list, delete, commit checks) with the set
    /// of loaded shards.
    pub(crate) async fn with_shards<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Coordinator, Millis, ShardSet) -> R + Send + 'static,
    ) -> Result<R, Unavailable> {
        let (tx, rx) = oneshot::channel();
        let q: Query = Box::new(move |c, now, loaded| {
            let _ = tx.send(f(c, now, loaded));
        });
        self.tx
            .send(Command::Query(q))
            .await
            .map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }

    /// Runs `f` on the coordinator (stats, listings).
    pub(crate) async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Coordinator, Millis) -> R + Send + 'static,
    ) -> Result<R, Unavailable> {
        self.with_shards(move |c, now, _| f(c, now)).await
    }

    /// Runs `f` on the coordinator for `group`, once its shard is loaded (waiting at most
    /// `load_wait`): `COORDINATOR_LOAD_IN_PROGRESS` if it is not, and
    /// `COORDINATOR_NOT_AVAILABLE` if the coordinator task has stopped.
    pub(crate) async fn with_group<R: Send + 'static>(
        &self,
        group: &str,
        f: impl FnOnce(&mut Coordinator, Millis) -> R + Send + 'static,
    ) -> Result<R, ErrorCode> {
        self.wait_loaded(group).await;
        let want = bit(group_shard(group));
        self.with_shards(move |c, now, loaded| {
            if loaded & want == 0 {
                Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
            } else {
                Ok(f(c, now))
            }
        })
        .await
        .map_err(|_| ErrorCode::COORDINATOR_NOT_AVAILABLE)?
    }

    /// `Ok` once the shard of `group` is loaded (waiting at most `load_wait`),
    /// `COORDINATOR_LOAD_IN_PROGRESS` otherwise: for requests served from the store alone
    /// (OffsetFetch), which must not read a shard before it is acquired.
    pub(crate) async fn ready(&self, group: &str) -> Result<(), ErrorCode> {
        self.wait_loaded(group).await;
        if *self.loaded.borrow() & bit(group_shard(group)) != 0 {
            Ok(())
        } else {
            Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        }
    }
}

/// The answer to a request for a group whose shard is not loaded, as Kafka's coordinator
/// gives it: JoinGroup and LeaveGroup get `COORDINATOR_LOAD_IN_PROGRESS`; SyncGroup gets
/// `REBALANCE_IN_PROGRESS` (the rebalance it belonged to is not known here, and clients
/// do not all expect the loading code from SyncGroup, so the member rejoins); Heartbeat
/// gets `NONE` (answered blindly: clients treat the loading code from Heartbeat as an
/// unexpected error, and the member is checked at its next heartbeat after the load).
fn not_loaded(command: &Command) -> Response {
    let loading = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
    match command {
        Command::Join(r, _) => Response::Join(JoinResponse::failed(r.member_id.clone(), loading)),
        Command::Sync(..) => Response::Sync(SyncResponse::failed(ErrorCode::REBALANCE_IN_PROGRESS)),
        Command::Leave(..) => Response::Leave(LeaveResponse {
            error: loading,
            members: Vec::new(),
        }),
        _ => Response::Heartbeat(HeartbeatResponse {
            error: ErrorCode::NONE,
        }),
    }
}

fn group_of(command: &Command) -> Option<&str> {
    match command {
        Command::Join(r, _) => Some(&r.group_id),
        Command::Sync(r, _) => Some(&r.group_id),
        Command::Heartbeat(r, _) => Some(&r.group_id),
        Command::Leave(r, _) => Some(&r.group_id),
        _ => None,
    }
}

async fn run(
    mut coordinator: Coordinator,
    mut rx: mpsc::Receiver<Command>,
    loaded_tx: watch::Sender<ShardSet>,
    writers: Arc<Writers>,
) {
    let start = Instant::now();
    let now = || Millis::from_duration(start.elapsed());
    let mut next_id = 0u64;
    let mut loaded: ShardSet = 0;
    let mut waiting: HashMap<RequestId, oneshot::Sender<Response>> = HashMap::new();
    loop {
        let deadline = coordinator.poll_timeout().map(|m| start + m.as_duration());
        let command = tokio::select! {
            c = rx.recv() => match c {
                Some(c) => Some(c),
                None => return,
            },
            () = sleep_until(deadline) => None,
        };
        let t = now();
        let command = match command {
            Some(c) if group_of(&c).is_some_and(|g| loaded & bit(group_shard(g)) == 0) => {
                let response = not_loaded(&c);
                if let Command::Join(_, tx)
                | Command::Sync(_, tx)
                | Command::Heartbeat(_, tx)
                | Command::Leave(_, tx) = c
                {
                    let _ = tx.send(response);
                }
                continue;
            }
            c => c,
        };
        match command {
            None => coordinator.handle_timeout(t),
            Some(Command::Query(q)) => q(&mut coordinator, t, loaded),
            Some(Command::Restore(shard, states, done)) => {
                let restored = restore(&mut coordinator, t, shard, states);
                loaded |= bit(shard);
                loaded_tx.send_replace(loaded);
                let _ = done.send(restored);
            }
            Some(Command::Unload(shards, done)) => {
                loaded &= !shards;
                loaded_tx.send_replace(loaded);
                let n = coordinator.unload(
                    |g| shards & bit(group_shard(g)) != 0,
                    ErrorCode::NOT_COORDINATOR,
                );
                if n > 0 {
                    tracing::info!(groups = n, "coordinator shards moved away: groups unloaded");
                }
                let _ = done.send(());
            }
            Some(cmd) => {
                next_id += 1;
                let id = RequestId(next_id);
                match cmd {
                    Command::Join(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.join(t, id, r);
                    }
                    Command::Sync(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.sync(t, id, r);
                    }
                    Command::Heartbeat(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.heartbeat(t, id, r);
                    }
                    Command::Leave(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.leave(t, id, r);
                    }
                    Command::Query(_) | Command::Restore(..) | Command::Unload(..) => {}
                }
            }
        }
        while let Some((group, state)) = coordinator.poll_persist() {
            writers.enqueue(group, state);
        }
        while let Some((id, response)) = coordinator.poll_response() {
            if let Some(tx) = waiting.remove(&id) {
                // The connection may be gone; the coordinator state is what matters.
                let _ = tx.send(response);
            }
        }
    }
}

/// Restores what was stored for `shard`; returns how many groups came back. A state that
/// cannot be used leaves its group to start empty, with one warning each.
fn restore(coordinator: &mut Coordinator, now: Millis, shard: u32, states: Loaded) -> usize {
    let mut restored = 0usize;
    let mut over = 0usize;
    for (group, state) in states {
        let outcome = state.and_then(|s| {
            if s.group_id == group {
                coordinator.restore(now, s)
            } else {
                Err(StateError::Invalid("stored under another group id"))
            }
        });
        match outcome {
            Ok(()) => restored += 1,
            // Counted, not logged one by one: the store may hold many.
            Err(StateError::OverCapacity(_)) => over += 1,
            Err(e) => {
                tracing::warn!(group = %group, shard, error = %e, "stored group state not restored: the group starts empty");
            }
        }
    }
    if over > 0 {
        tracing::warn!(
            shard,
            groups = over,
            "stored group states beyond the coordinator's limits (max_groups, max_state_bytes, ...) not restored: those groups start empty"
        );
    }
    restored
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

// ----- following the membership ---------------------------------------------------------------

/// Where a shard is, as the follower sees it.
enum Slot {
    Released,
    Loading(AbortHandle),
    Loaded,
}

/// The transaction side of the shards: loaded after the groups, let go of first.
#[derive(Clone)]
struct TxnSide {
    txns: Arc<OnceLock<Txns>>,
    pending: Arc<PendingTxnOffsets>,
}

impl TxnSide {
    /// Loads the transactions of `shard` and the offsets they committed to its groups.
    async fn load(&self, store: &dyn OffsetStore, shard: u32) -> kafka_store::StoreResult<()> {
        let Some(txns) = self.txns.get() else {
            return Ok(());
        };
        let pending = store.pending_offsets(shard).await?;
        txns.load_shard(shard).await?;
        let mut sets = self.pending.lock();
        sets.retain(|g, _| group_shard(g) != shard);
        for p in pending {
            if group_shard(&p.group) == shard && !p.offsets.is_empty() {
                sets.entry(p.group)
                    .or_default()
                    .insert(p.producer_id, p.offsets);
            }
        }
        Ok(())
    }

    /// Lets go of the transactions of `shards` and of their groups' pending offsets.
    async fn unload(&self, shards: ShardSet) {
        if let Some(txns) = self.txns.get() {
            for shard in (0..GROUP_SHARDS).filter(|s| shards & bit(*s) != 0) {
                txns.unload_shard(shard).await;
            }
        }
        self.pending
            .lock()
            .retain(|g, _| shards & bit(group_shard(g)) == 0);
    }
}

async fn follow(
    membership: Arc<dyn Membership>,
    tx: mpsc::WeakSender<Command>,
    store: Arc<dyn OffsetStore>,
    writers: Arc<Writers>,
    settings: GroupStateSettings,
    txn: TxnSide,
) {
    // Whatever an earlier follower held is let go first.
    if unload(&tx, ALL_SHARDS).await.is_err() {
        return;
    }
    txn.unload(ALL_SHARDS).await;
    writers.stop(ALL_SHARDS);
    let mut slots: Vec<Slot> = (0..GROUP_SHARDS).map(|_| Slot::Released).collect();
    let mut loads: JoinSet<u32> = JoinSet::new();
    let mut views = membership.subscribe();
    let mut watching = true;
    loop {
        let route = Route::of(membership.as_ref());
        let mut lost: ShardSet = 0;
        for (shard, slot) in (0..GROUP_SHARDS).zip(slots.iter_mut()) {
            let want = route.coordinates_shard(shard);
            match (want, &*slot) {
                (true, Slot::Released) => {
                    let handle = loads.spawn(load(
                        shard,
                        tx.clone(),
                        Arc::clone(&store),
                        Arc::clone(&writers),
                        settings.clone(),
                        txn.clone(),
                    ));
                    *slot = Slot::Loading(handle);
                }
                (false, Slot::Loading(handle)) => {
                    handle.abort();
                    lost |= bit(shard);
                    *slot = Slot::Released;
                }
                (false, Slot::Loaded) => {
                    lost |= bit(shard);
                    *slot = Slot::Released;
                }
                _ => {}
            }
        }
        if lost != 0 {
            if unload(&tx, lost).await.is_err() {
                return;
            }
            txn.unload(lost).await;
            writers.stop(lost);
            for shard in (0..GROUP_SHARDS).filter(|s| lost & bit(*s) != 0) {
                store.release_shard(shard).await;
            }
            tracing::info!(shards = ?shard_list(lost), "coordinator shards released");
        }
        tokio::select! {
            changed = views.changed(), if watching => {
                // A membership that publishes no changes is re-checked on the interval.
                watching = changed.is_ok();
            }
            () = tokio::time::sleep(settings.recheck_interval) => {}
            Some(done) = loads.join_next_with_id(), if !loads.is_empty() => {
                // Only the load the slot waits for: an earlier one for the same shard
                // (lost and regained meanwhile) may finish after it was superseded.
                if let Ok((id, shard)) = done
                    && let Some(slot) = slots.get_mut(shard as usize)
                    && matches!(slot, Slot::Loading(h) if h.id() == id)
                {
                    *slot = Slot::Loaded;
                }
            }
        }
        if tx.upgrade().is_none() {
            return;
        }
    }
}

fn shard_list(set: ShardSet) -> Vec<u32> {
    (0..GROUP_SHARDS).filter(|s| set & bit(*s) != 0).collect()
}

async fn unload(tx: &mpsc::WeakSender<Command>, shards: ShardSet) -> Result<(), Unavailable> {
    let tx = tx.upgrade().ok_or(Unavailable)?;
    let (done, wait) = oneshot::channel();
    tx.send(Command::Unload(shards, done))
        .await
        .map_err(|_| Unavailable)?;
    drop(tx);
    wait.await.map_err(|_| Unavailable)
}

/// Loads `shard` until it is loaded (retrying with backoff) or the broker is gone;
/// returns the shard.
async fn load(
    shard: u32,
    tx: mpsc::WeakSender<Command>,
    store: Arc<dyn OffsetStore>,
    writers: Arc<Writers>,
    settings: GroupStateSettings,
    txn: TxnSide,
) -> u32 {
    let started = Instant::now();
    let mut backoff = settings.load_retry_min;
    let mut failures = 0u32;
    loop {
        let attempt = async {
            store.acquire_shard(shard).await?;
            let states = store.group_states(shard).await?;
            // Before the shard is marked loaded: no transactional request is served
            // from a half-loaded shard.
            txn.load(store.as_ref(), shard).await?;
            Ok::<_, kafka_store::StoreError>(states)
        };
        match attempt.await {
            Ok(states) => {
                let decoded: Loaded = states
                    .into_iter()
                    .filter(|(g, _)| group_shard(g) == shard)
                    .map(|(g, blob)| {
                        let state = GroupSnapshot::decode(&blob);
                        (g, state)
                    })
                    .collect();
                let stored = decoded.len();
                writers.start(shard);
                let Some(sender) = tx.upgrade() else {
                    return shard;
                };
                let (done, restored) = oneshot::channel();
                if sender
                    .send(Command::Restore(shard, decoded, done))
                    .await
                    .is_err()
                {
                    return shard;
                }
                drop(sender);
                let restored = restored.await.unwrap_or(0);
                tracing::info!(
                    shard,
                    stored,
                    restored,
                    failures,
                    took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "coordinator shard loaded"
                );
                return shard;
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(shard, error = %e, "cannot load a coordinator shard; retrying");
                }
                failures = failures.saturating_add(1);
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(settings.load_retry_max);
        if tx.upgrade().is_none() {
            return shard;
        }
    }
}

// ----- writing group states -----------------------------------------------------------------

/// One writer per shard; see the module docs.
struct Writers {
    store: Arc<dyn OffsetStore>,
    settings: GroupStateSettings,
    shards: Vec<Arc<ShardWriter>>,
}

impl std::fmt::Debug for Writers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writers").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct ShardWriter {
    queue: Mutex<WriterQueue>,
    wake: Notify,
}

#[derive(Default)]
struct WriterQueue {
    /// The writer task while the shard is loaded; `None`: states are not taken.
    task: Option<AbortHandle>,
    /// States to write, at most one per group (the newest).
    pending: BTreeMap<String, Option<GroupSnapshot>>,
}

impl ShardWriter {
    fn lock(&self) -> std::sync::MutexGuard<'_, WriterQueue> {
        // Plain values: a panic while held leaves nothing half-done.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Writers {
    fn new(store: Arc<dyn OffsetStore>, settings: GroupStateSettings) -> Writers {
        Writers {
            store,
            settings,
            shards: (0..GROUP_SHARDS)
                .map(|_| Arc::new(ShardWriter::default()))
                .collect(),
        }
    }

    fn shard(&self, shard: u32) -> Option<&Arc<ShardWriter>> {
        self.shards.get(shard as usize)
    }

    /// Queues `group`'s newest state (`None`: delete) for its shard's writer; dropped if
    /// the shard is not loaded (its groups are not here either).
    fn enqueue(&self, group: String, state: Option<GroupSnapshot>) {
        let Some(w) = self.shard(group_shard(&group)) else {
            return;
        };
        let mut q = w.lock();
        if q.task.is_some() {
            q.pending.insert(group, state);
            drop(q);
            w.wake.notify_one();
        }
    }

    /// Starts the writer of `shard` (a no-op if it runs).
    fn start(&self, shard: u32) {
        let Some(w) = self.shard(shard) else {
            return;
        };
        let mut q = w.lock();
        if q.task.is_none() {
            let task = tokio::spawn(write_shard(
                Arc::clone(w),
                Arc::clone(&self.store),
                self.settings.clone(),
            ));
            q.task = Some(task.abort_handle());
        }
    }

    /// Stops the writers of `shards`, dropping what they had not written: another
    /// gateway writes those shards now.
    fn stop(&self, shards: ShardSet) {
        for shard in (0..GROUP_SHARDS).filter(|s| shards & bit(*s) != 0) {
            if let Some(w) = self.shard(shard) {
                let mut q = w.lock();
                if let Some(task) = q.task.take() {
                    task.abort();
                }
                let dropped = std::mem::take(&mut q.pending).len();
                if dropped > 0 {
                    tracing::debug!(
                        shard,
                        dropped,
                        "group states not written before the shard moved"
                    );
                }
            }
        }
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        self.stop(ALL_SHARDS);
    }
}

/// Writes the states queued for one shard, in turn, until stopped.
async fn write_shard(
    w: Arc<ShardWriter>,
    store: Arc<dyn OffsetStore>,
    settings: GroupStateSettings,
) {
    let mut failing = false;
    let mut backoff = settings.load_retry_min;
    loop {
        let next = w.lock().pending.pop_first();
        let Some((group, state)) = next else {
            // A wake-up between the check and here is kept by `Notify` as a permit.
            w.wake.notified().await;
            continue;
        };
        let blob = state.as_ref().map(GroupSnapshot::encode);
        match store.put_group_state(&group, blob).await {
            Ok(()) => {
                if failing {
                    tracing::info!("group states are written again");
                    failing = false;
                }
                backoff = settings.load_retry_min;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(group = %group, error = %e, "cannot write a group state; retrying");
                    failing = true;
                }
                // Written later, unless a newer state of the group came meanwhile.
                w.lock().pending.entry(group).or_insert(state);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(settings.load_retry_max);
            }
        }
    }
}

/// Deletes the offsets of groups inactive for longer than the retention, until the broker
/// is gone.
async fn sweep_offsets(
    tx: mpsc::WeakSender<Command>,
    offsets: Weak<OffsetGroups>,
    store: Arc<dyn OffsetStore>,
) {
    let Some(rules) = offsets.upgrade().map(|o| o.rules) else {
        return;
    };
    let every = (rules.retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (Some(tx), Some(offsets)) = (tx.upgrade(), offsets.upgrade()) else {
            return;
        };
        let Ok(stored) = store.groups().await else {
            continue;
        };
        let (answer, answered) = oneshot::channel();
        let q: Query = Box::new(move |c, _, loaded| {
            let with_members = c
                .list(&[])
                .into_iter()
                .filter(|g| g.state != kafka_groups::GroupState::Empty)
                .map(|g| g.group_id)
                .collect::<HashSet<_>>();
            let _ = answer.send((with_members, loaded));
        });
        if tx.send(Command::Query(q)).await.is_err() {
            return;
        }
        drop(tx);
        let Ok((with_members, loaded)) = answered.await else {
            return;
        };
        // Each shard's owner sweeps it: offsets of groups coordinated elsewhere are theirs.
        let stored: Vec<String> = stored
            .into_iter()
            .filter(|g| loaded & bit(group_shard(g)) != 0)
            .collect();
        let now = crate::broker::now_ms();
        let due = offsets.due(stored, &with_members, now);
        let cutoff = now.saturating_sub(i64::try_from(rules.retention.as_millis()).unwrap_or(0));
        let mut expired = 0usize;
        for g in due {
            if offsets.forget_if_idle(&g, cutoff) && store.delete_group(&g).await.is_ok() {
                expired += 1;
            }
        }
        if expired > 0 {
            tracing::info!(groups = expired, "committed offsets expired");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(rules: OffsetRetention) -> OffsetGroups {
        OffsetGroups {
            rules,
            active: Mutex::new(HashMap::new()),
        }
    }

    const RULES: OffsetRetention = OffsetRetention {
        retention: Duration::from_millis(1000),
        max_groups: 2,
    };

    #[test]
    fn commits_beyond_the_group_cap_are_refused() {
        let g = groups(RULES);
        assert!(g.admit("a", 0));
        assert!(g.admit("b", 0));
        assert!(!g.admit("c", 0));
        assert!(g.admit("a", 5), "a group already counted may commit again");
    }

    #[test]
    fn idle_groups_expire_and_groups_with_members_do_not() {
        let g = groups(RULES);
        assert!(g.admit("idle", 0));
        assert!(g.admit("busy", 0));
        let stored = || vec!["idle".to_string(), "busy".to_string(), "old".to_string()];
        let members: HashSet<String> = ["busy".to_string()].into();
        // "old" is first seen now: its retention starts now.
        assert!(g.due(stored(), &members, 999).is_empty());
        let mut due = g.due(stored(), &members, 1000);
        due.sort();
        assert_eq!(due, vec!["idle".to_string()]);
        assert!(g.forget_if_idle("idle", 0));
        let stored = vec!["busy".to_string(), "old".to_string()];
        assert_eq!(
            g.due(stored, &HashSet::new(), 1999),
            vec!["old".to_string()]
        );
    }

    #[test]
    fn a_commit_after_the_sweep_decided_keeps_the_offsets() {
        let g = groups(RULES);
        assert!(g.admit("a", 0));
        assert_eq!(
            g.due(vec!["a".into()], &HashSet::new(), 1000),
            vec!["a".to_string()]
        );
        assert!(g.admit("a", 1001));
        assert!(!g.forget_if_idle("a", 0));
    }
}
