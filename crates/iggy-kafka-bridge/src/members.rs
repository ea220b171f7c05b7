//! Several gateways on one Iggy: who is alive, and whether this gateway holds its lease.
//!
//! The gateways share one append-only log, the one-partition topic `members` in the
//! bridge's meta stream. Each gateway appends a heartbeat every `heartbeat_interval`:
//!
//! ```text
//! {"n":node id,"e":epoch,"l":[{"name":..,"host":..,"port":..}]}   heartbeat
//! {"n":node id,"e":epoch,"leave":true}                          clean leave
//! ```
//!
//! and tails the log from the offset after the last record it read. There is no
//! consensus of our own: Iggy orders the records, and each gateway folds them into its
//! own view ([`ViewState`], a pure function of the records and the local clock):
//!
//! - a member is live while its last heartbeat was observed (local monotonic clock, at
//!   receipt) less than `session_timeout` ago;
//! - a record with a newer epoch of a node id replaces the older incarnation, and
//!   records of an older epoch are ignored from then on;
//! - a leave record removes that incarnation at once;
//! - node ids outside the configured broker list, records over `max_record_bytes` and
//!   records that do not parse are skipped (one rate-limited warning per kind), so the
//!   view never holds more than one entry per configured broker.
//!
//! **Epochs.** At join the gateway reads the most recent records (enough for every
//! broker to have written two session timeouts of heartbeats) and takes an epoch greater
//! than every epoch of its node id there and not less than the wall clock in
//! milliseconds, so a restart gets a higher epoch even after the older records expired
//! (as long as the wall clock does not step back by more than the downtime). The epoch
//! goes out with the first heartbeat, which `join` waits for. The records of that window
//! start the view as if observed at join: a gateway that stopped shortly before shows
//! as live for up to one session timeout (the safe side: nobody takes over from it
//! earlier than a gateway that had been watching would).
//!
//! **Leases.** [`Membership::holds_lease`] is true while the last *acknowledged*
//! heartbeat was *sent* (local monotonic clock, taken before the send starts) less than
//! `session_timeout - lease_margin` ago. Why a stale owner stops before another takes
//! over: a heartbeat sent at time `s` reaches Iggy after `s`, so every other gateway
//! observes it at some `r >= s` and keeps the member live until `r + session_timeout`
//! at least. The owner stopped at `s + session_timeout - lease_margin`, earlier by at
//! least `lease_margin` (covering the difference in clock rates over one session timeout,
//! and the time an owner takes to notice). Heartbeats that reached Iggy but whose
//! acknowledgement was lost only make the others wait longer. A gateway that reads a
//! newer epoch of its own node id (it was restarted elsewhere while it was paused or cut
//! off) is fenced: it never holds its lease again and stops heartbeating.
//!
//! A lease that lapsed is not taken up again by the same start: the others may have
//! expired that incarnation (and an expired incarnation never comes back into their
//! views), so the gateway stops heartbeating, writes a leave record (best effort) and
//! must join again, with a new epoch, to be a member. This keeps a gateway that was
//! paused or cut off from acting on ownership it held before while the others, still
//! unaware of its return, act on theirs.
//!
//! **Handing keys over to a gateway that joins.** Placement is a function of the view
//! (rendezvous hashing, `kafka_broker::cluster`): when a gateway joins, the keys
//! (partitions, coordinator shards) it now weighs most for move to it from gateways that
//! are still running. Those stop acting on them when they read its first heartbeat; the
//! joiner must not start before that, or two gateways would append to one partition or
//! write one shard's states at once, each from its own memory (producer state,
//! transaction index, coordinator state). Two rules make the order hold without any
//! exchange:
//!
//! - *A view has a maximum age.* A gateway acts as an owner only while the last read of
//!   the members log that reached its end *started* less than `view_max_age` ago. Any
//!   record appended before that start is in its view; a gateway whose reads stall drops
//!   out of its own view (owning nothing) until a read succeeds again. This does not end
//!   its lease: the others still see it, so nobody else takes its keys meanwhile.
//! - *A joiner waits.* A gateway includes itself in its own view only `view_max_age +
//!   lease_margin` after its first heartbeat was acknowledged. By then every gateway
//!   still acting as an owner has started a read after that heartbeat was appended, so
//!   it has seen the joiner and given up the joiner's keys (`lease_margin` again covers
//!   clock rates and the time an owner takes to act on a new view).
//!
//! The joiner is in every view meanwhile, its own included, so every gateway names the
//! same leaders and coordinators (Metadata that named another gateway for a moment
//! and then the joiner again, at the same leader epoch, can leave a librdkafka consumer
//! fetching from a gateway that is not the leader). It answers `NOT_LEADER_OR_FOLLOWER`
//! and `NOT_COORDINATOR` for its keys until the wait is over, as a Kafka partition does
//! while its leader moves; clients retry. [`Membership::acts_as_owner`] tells the
//! broker, and a new view version (same members) is published when it changes. Requests an owner had already started
//! before it saw the joiner (an append on its way to Iggy) are not fenced by this: they
//! complete within that wait unless Iggy takes longer than it to answer.
//!
//! The view includes this gateway while it holds its lease. It is published (with a new
//! `version`) when the set of members or their epochs or listeners change, and when
//! this gateway starts or stops acting as an owner.
//!
//! **Log size.** The topic is created with `retention` as Iggy's message expiry and
//! `segment_bytes` as its segment size, so Iggy removes whole segments of old heartbeats
//! by itself; nothing else purges it. Reading at join is bounded by the window above.

use crate::IggyBridge;
use crate::errors::{BridgeError, Op, map_iggy_error, timeout};
use crate::metrics::IggyMetrics;
use crate::polled;
use crate::proof::{MetaProof, Verdict};
use bytes::Bytes;
use iggy::prelude::{
    Identifier, IggyByteSize, IggyClient, IggyDuration, IggyError, IggyExpiry, IggyMessage,
    MessageClient, Partitioning, PollingStrategy, TopicClient, TopicCreateOptions,
};
use kafka_store::cluster::{LiveView, Member, MemberListener, Membership};
use kafka_store::{StoreError, StoreResult};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The members log's topic in the meta stream.
pub const MEMBERS_TOPIC: &str = "members";

/// Default bound on one record of the members log, in bytes.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 * 1024;

/// Default expiry of the members log's records.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// Default segment size of the members log (small, so that expiry can remove old
/// heartbeats: Iggy removes whole segments only).
pub const DEFAULT_SEGMENT_BYTES: u64 = 1024 * 1024;

/// Records read per poll of the members log.
const PAGE: u32 = 1000;

/// At most one warning of each kind per this interval.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How this gateway joins the others.
#[derive(Debug, Clone)]
pub struct JoinSettings {
    /// This gateway's node id; must be in `brokers`.
    pub node_id: i32,
    /// Where clients reach this gateway.
    pub listeners: Vec<MemberListener>,
    /// The node ids of the configured broker list (the same on every gateway).
    pub brokers: Vec<i32>,
    /// How often a heartbeat is written; under a third of `session_timeout`.
    pub heartbeat_interval: Duration,
    /// How long a member stays live after its last heartbeat was observed.
    pub session_timeout: Duration,
    /// How much earlier than `session_timeout` this gateway gives up its own lease;
    /// at least `heartbeat_interval / 2` and under `session_timeout -
    /// heartbeat_interval`. [`JoinSettings::new`] uses one heartbeat interval.
    pub lease_margin: Duration,
    /// The oldest a read of the members log that reached its end may have started for
    /// this gateway to act as an owner (see the module docs); also how long, with
    /// `lease_margin`, a joining gateway waits before it owns anything. At least half a
    /// heartbeat interval and under the session timeout; [`JoinSettings::new`] uses two
    /// heartbeat intervals.
    pub view_max_age: Duration,
    /// Records larger than this are not written and are skipped when read.
    pub max_record_bytes: usize,
    /// Expiry of the members log's records (Iggy message expiry of the topic).
    pub retention: Duration,
    /// Segment size of the members log's topic.
    pub segment_bytes: u64,
}

impl JoinSettings {
    /// Settings with the defaults for everything but the identity and the two timings.
    pub fn new(
        node_id: i32,
        listeners: Vec<MemberListener>,
        brokers: Vec<i32>,
        heartbeat_interval: Duration,
        session_timeout: Duration,
    ) -> JoinSettings {
        JoinSettings {
            node_id,
            listeners,
            brokers,
            heartbeat_interval,
            session_timeout,
            lease_margin: heartbeat_interval,
            view_max_age: heartbeat_interval * 2,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            retention: DEFAULT_RETENTION,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }

    fn validate(&self) -> Result<(), BridgeError> {
        let bad = |m: String| Err(BridgeError::Config(m));
        if !self.brokers.contains(&self.node_id) {
            return bad(format!(
                "node id {} is not in the broker list",
                self.node_id
            ));
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval * 3 >= self.session_timeout
        {
            return bad(format!(
                "heartbeat interval {:?} must be above zero and under a third of the session timeout {:?}",
                self.heartbeat_interval, self.session_timeout
            ));
        }
        if self.lease_margin < self.heartbeat_interval / 2
            || self.lease_margin + self.heartbeat_interval >= self.session_timeout
        {
            return bad(format!(
                "lease margin {:?} must be at least half a heartbeat interval and under the session timeout less one",
                self.lease_margin
            ));
        }
        if self.view_max_age < self.heartbeat_interval / 2
            || self.view_max_age >= self.session_timeout
        {
            return bad(format!(
                "view max age {:?} must be at least half a heartbeat interval and under the session timeout",
                self.view_max_age
            ));
        }
        if self.retention < self.session_timeout * 10 {
            return bad(format!(
                "members log retention {:?} must be at least ten session timeouts",
                self.retention
            ));
        }
        Ok(())
    }

    /// Records read at join: two session timeouts of heartbeats from every broker.
    fn window(&self) -> u32 {
        let per_session = self
            .session_timeout
            .as_millis()
            .div_ceil(self.heartbeat_interval.as_millis().max(1));
        let n = per_session
            .saturating_mul(2)
            .saturating_mul(self.brokers.len() as u128)
            .saturating_add(16);
        u32::try_from(n.min(100_000)).unwrap_or(100_000)
    }
}

/// One record of the members log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Node id.
    #[serde(rename = "n")]
    pub node_id: i32,
    /// Epoch of that node id's incarnation.
    #[serde(rename = "e")]
    pub epoch: u64,
    /// Listeners (heartbeats).
    #[serde(rename = "l", default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerRecord>,
    /// A clean leave.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leave: bool,
}

/// A listener in a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRecord {
    /// Listener name.
    pub name: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

impl MemberRecord {
    fn heartbeat(me: &Member) -> MemberRecord {
        MemberRecord {
            node_id: me.node_id,
            epoch: me.epoch,
            listeners: me
                .listeners
                .iter()
                .map(|l| ListenerRecord {
                    name: l.name.clone(),
                    host: l.host.clone(),
                    port: l.port,
                })
                .collect(),
            leave: false,
        }
    }
}

/// What one record did to a [`ViewState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The view's members changed.
    Changed,
    /// Nothing changed (a renewal, or an older epoch).
    Unchanged,
    /// A node id outside the broker list.
    UnknownNode,
    /// Over `max_record_bytes`, or not a record.
    Unreadable,
    /// A newer epoch of this gateway's own node id: it is fenced.
    Fenced,
}

#[derive(Debug, Clone)]
struct Entry {
    epoch: u64,
    listeners: Vec<MemberListener>,
    seen: Instant,
    left: bool,
}

/// The other gateways as the records read so far show them (pure: records and the
/// local clock in, view out).
#[derive(Debug, Clone)]
pub struct ViewState {
    me: i32,
    my_epoch: u64,
    known: BTreeSet<i32>,
    max_record_bytes: usize,
    entries: BTreeMap<i32, Entry>,
    fenced: bool,
}

impl ViewState {
    /// An empty view for gateway `me` at `my_epoch` among `brokers`.
    pub fn new(me: i32, my_epoch: u64, brokers: &[i32], max_record_bytes: usize) -> ViewState {
        ViewState {
            me,
            my_epoch,
            known: brokers.iter().copied().collect(),
            max_record_bytes,
            entries: BTreeMap::new(),
            fenced: false,
        }
    }

    /// Whether a newer epoch of this gateway's node id was read.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Folds one record's payload, observed at `now`.
    pub fn observe(&mut self, payload: &[u8], now: Instant) -> Observed {
        if payload.len() > self.max_record_bytes {
            return Observed::Unreadable;
        }
        let Ok(r) = serde_json::from_slice::<MemberRecord>(payload) else {
            return Observed::Unreadable;
        };
        if !self.known.contains(&r.node_id) {
            return Observed::UnknownNode;
        }
        if r.node_id == self.me {
            if r.epoch > self.my_epoch && !self.fenced {
                self.fenced = true;
                return Observed::Fenced;
            }
            return Observed::Unchanged;
        }
        let listeners: Vec<MemberListener> = r
            .listeners
            .into_iter()
            .map(|l| MemberListener {
                name: l.name,
                host: l.host,
                port: l.port,
            })
            .collect();
        match self.entries.get_mut(&r.node_id) {
            Some(e) if r.epoch < e.epoch => Observed::Unchanged,
            Some(e) if r.epoch == e.epoch => {
                if e.left {
                    return Observed::Unchanged;
                }
                if r.leave {
                    e.left = true;
                    return Observed::Changed;
                }
                e.seen = now;
                if e.listeners != listeners {
                    e.listeners = listeners;
                    return Observed::Changed;
                }
                Observed::Unchanged
            }
            _ => {
                let was_live = self.entries.get(&r.node_id).is_some_and(|e| !e.left);
                self.entries.insert(
                    r.node_id,
                    Entry {
                        epoch: r.epoch,
                        listeners,
                        seen: now,
                        left: r.leave,
                    },
                );
                if r.leave && !was_live {
                    Observed::Unchanged
                } else {
                    Observed::Changed
                }
            }
        }
    }

    /// Drops members whose last heartbeat was observed `session_timeout` or longer
    /// before `now`; whether any was dropped.
    pub fn expire(&mut self, now: Instant, session_timeout: Duration) -> bool {
        let mut changed = false;
        for e in self.entries.values_mut() {
            if !e.left && now.saturating_duration_since(e.seen) >= session_timeout {
                e.left = true;
                changed = true;
            }
        }
        changed
    }

    /// The live members, sorted by node id, with `me` added when given.
    pub fn members(&self, me: Option<&Member>) -> Vec<Member> {
        let mut out: Vec<Member> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.left)
            .map(|(&node_id, e)| Member {
                node_id,
                epoch: e.epoch,
                listeners: e.listeners.clone(),
            })
            .collect();
        if let Some(me) = me {
            out.push(me.clone());
        }
        out.sort_by_key(|m| m.node_id);
        out
    }
}

/// At most one warning per [`WARN_EVERY`], with the count of the skipped ones.
#[derive(Debug, Default)]
struct RateLimited {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    /// Whether to log now; `Some(suppressed since the last line)`.
    fn tick(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < WARN_EVERY => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

struct Shared {
    me: Member,
    settings: JoinSettings,
    stream: String,
    call_timeout: Duration,
    metrics: IggyMetrics,
    /// Signs heartbeats and checks every record read (see [`crate::proof`]): a forged
    /// heartbeat would advertise its writer's host to every client.
    proof: MetaProof,
    view: watch::Sender<Arc<LiveView>>,
    state: Mutex<ViewState>,
    /// Send start of the last acknowledged heartbeat.
    last_ack_sent: Mutex<Option<Instant>>,
    /// When the first heartbeat was acknowledged (the join wait counts from here).
    joined: Mutex<Option<Instant>>,
    /// Start of the last read of the members log that reached its end.
    caught_up: Mutex<Option<Instant>>,
    fenced: AtomicBool,
    left: AtomicBool,
    /// The lease ran out once; never held again by this start.
    lapsed: AtomicBool,
    /// Whether this gateway acted as an owner at the last publish: a change publishes a
    /// new view version (same members), so followers of the view look again.
    published_owner: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// The membership of this gateway among those sharing the Iggy behind it; see the
/// module docs. Dropping it stops its heartbeats without a leave record (the others
/// drop it after the session timeout); [`IggyMembership::leave`] leaves at once.
#[derive(Debug)]
pub struct IggyMembership {
    shared: Arc<Shared>,
    writer: Arc<IggyClient>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for IggyMembership {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn named(name: &str) -> StoreResult<Identifier> {
    Identifier::named(name).map_err(|e| StoreError::Internal(format!("name {name:?}: {e}")))
}

async fn call<T>(
    metrics: &IggyMetrics,
    limit: Duration,
    op: Op,
    fut: impl Future<Output = Result<T, IggyError>>,
) -> StoreResult<T> {
    let round_trip = async {
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_iggy_error(&e, op, MEMBERS_TOPIC, 0)),
            Err(_) => Err(timeout(
                op,
                &format!("{MEMBERS_TOPIC}: no answer within {limit:?}"),
            )),
        }
    };
    metrics.observe(op, round_trip).await
}

/// Whether a record of the members log carries a valid proof (always, without a
/// secret); a refused one is counted.
fn proven(proof: &MetaProof, metrics: &IggyMetrics, m: &IggyMessage) -> bool {
    if !proof.enabled() {
        return true;
    }
    let header = crate::proof::header_of(m);
    let verdict = proof.check(
        MEMBERS_TOPIC,
        &m.payload,
        header.as_deref(),
        m.header.timestamp,
    );
    if verdict == Verdict::Accepted {
        return true;
    }
    metrics.record_meta_refused(MEMBERS_TOPIC, verdict.reason());
    false
}

fn setup(e: StoreError) -> BridgeError {
    BridgeError::Setup(format!("members log: {e}"))
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl IggyBridge {
    /// Joins the gateways sharing this Iggy (see [`crate::members`]): creates the
    /// members log if missing, picks this start's epoch, writes the first heartbeat and
    /// starts the heartbeat and tail tasks. Two Iggy connections of its own.
    pub async fn join_cluster(
        &self,
        settings: JoinSettings,
    ) -> Result<Arc<IggyMembership>, BridgeError> {
        settings.validate()?;
        let config = self.config();
        let stream = config.meta_stream.clone();
        let call_timeout = config.call_timeout;
        let proof = crate::meta::proof_of(config);
        let metrics = self.metrics().clone();
        let writer = Arc::new(self.open_own_session().await?);
        let reader = self.open_own_session().await?;
        ensure_members_topic(&writer, &stream, &settings, call_timeout, &metrics)
            .await
            .map_err(setup)?;

        // The recent records: the highest epoch of this node id, and the first view.
        let (s, t) = (
            named(&stream).map_err(setup)?,
            named(MEMBERS_TOPIC).map_err(setup)?,
        );
        let recent = call(
            &metrics,
            call_timeout,
            Op::Read,
            polled::poll_checked(
                &reader,
                &s,
                &t,
                0,
                &PollingStrategy::last(),
                settings.window(),
            ),
        )
        .await
        .map_err(setup)?;
        let seen_epoch = recent
            .messages
            .iter()
            .filter_map(|m| serde_json::from_slice::<MemberRecord>(&m.payload).ok())
            .filter(|r| r.node_id == settings.node_id)
            .map(|r| r.epoch)
            .max();
        let epoch = seen_epoch
            .map_or(0, |e| e.saturating_add(1))
            .max(unix_millis());
        let me = Member {
            node_id: settings.node_id,
            epoch,
            listeners: settings.listeners.clone(),
        };
        let first = serde_json::to_vec(&MemberRecord::heartbeat(&me))
            .map_err(|e| BridgeError::Config(format!("member record: {e}")))?;
        if first.len() > settings.max_record_bytes {
            return Err(BridgeError::Config(format!(
                "this gateway's member record takes {} bytes, over the bound of {}",
                first.len(),
                settings.max_record_bytes
            )));
        }
        let mut state = ViewState::new(
            settings.node_id,
            epoch,
            &settings.brokers,
            settings.max_record_bytes,
        );
        let now = Instant::now();
        for m in recent
            .messages
            .iter()
            .filter(|m| proven(&proof, &metrics, m))
        {
            state.observe(&m.payload, now);
        }
        let next = recent.messages.last().map_or(0, |m| m.header.offset + 1);
        let shared = Arc::new(Shared {
            view: watch::Sender::new(Arc::new(LiveView {
                members: state.members(None),
                version: 1,
            })),
            me,
            settings,
            stream,
            call_timeout,
            metrics,
            proof,
            state: Mutex::new(state),
            last_ack_sent: Mutex::new(None),
            joined: Mutex::new(None),
            caught_up: Mutex::new(None),
            fenced: AtomicBool::new(false),
            left: AtomicBool::new(false),
            lapsed: AtomicBool::new(false),
            published_owner: AtomicBool::new(false),
        });
        // The first heartbeat may be slow (a busy Iggy, a cold connection): each attempt
        // waits one heartbeat interval as usual, and join tries again until one session
        // timeout has passed. A repeated heartbeat record is harmless.
        let give_up = Instant::now() + shared.settings.session_timeout;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match heartbeat(&shared, &writer, &first).await {
                Ok(()) => {
                    if let Ok(mut joined) = shared.joined.lock() {
                        *joined = Some(Instant::now());
                    }
                    break;
                }
                Err(e) if Instant::now() + shared.settings.heartbeat_interval < give_up => {
                    if attempts == 1 {
                        tracing::warn!(error = %e, "first heartbeat not acknowledged, trying again");
                    }
                    tokio::time::sleep(
                        shared
                            .settings
                            .heartbeat_interval
                            .min(Duration::from_millis(200)),
                    )
                    .await;
                }
                Err(e) => {
                    return Err(BridgeError::Setup(format!(
                        "first heartbeat ({attempts} attempts): {e}"
                    )));
                }
            }
        }
        shared.publish();
        tracing::info!(
            node_id = shared.me.node_id,
            epoch = shared.me.epoch,
            "joined the gateways on this Iggy"
        );
        let tasks = vec![
            tokio::spawn(heartbeat_loop(shared.clone(), writer.clone(), first)),
            tokio::spawn(tail_loop(shared.clone(), reader, next)),
        ];
        Ok(Arc::new(IggyMembership {
            shared,
            writer,
            tasks,
        }))
    }
}

async fn ensure_members_topic(
    client: &IggyClient,
    stream: &str,
    settings: &JoinSettings,
    limit: Duration,
    metrics: &IggyMetrics,
) -> StoreResult<()> {
    let (s, t) = (named(stream)?, named(MEMBERS_TOPIC)?);
    if call(metrics, limit, Op::Admin, client.get_topic(&s, &t))
        .await?
        .is_some()
    {
        return Ok(());
    }
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::new(
            settings.retention,
        ))),
        segment_size: Some(IggyByteSize::from(settings.segment_bytes)),
        ..TopicCreateOptions::default()
    };
    match call(
        metrics,
        limit,
        Op::Admin,
        client.create_topic(&s, MEMBERS_TOPIC, &options),
    )
    .await
    {
        Ok(_) | Err(StoreError::TopicAlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Appends one record; on acknowledgement of a heartbeat, records its send start as the
/// lease's renewal.
async fn heartbeat(shared: &Shared, client: &IggyClient, payload: &[u8]) -> StoreResult<()> {
    let started = Instant::now();
    append(shared, client, payload, shared.settings.heartbeat_interval).await?;
    let mut last = shared
        .last_ack_sent
        .lock()
        .map_err(|_| StoreError::Internal("membership lock poisoned".into()))?;
    if last.is_none_or(|t| t < started) {
        *last = Some(started);
    }
    Ok(())
}

async fn append(
    shared: &Shared,
    client: &IggyClient,
    payload: &[u8],
    limit: Duration,
) -> StoreResult<()> {
    let (s, t) = (named(&shared.stream)?, named(MEMBERS_TOPIC)?);
    let headers = shared
        .proof
        .sign(MEMBERS_TOPIC, payload, crate::proof::unix_ms())
        .map(|proof| crate::proof::headers(&proof))
        .transpose()?;
    let message = IggyMessage::builder()
        .payload(Bytes::copy_from_slice(payload))
        .maybe_user_headers(headers)
        .build()
        .map_err(|e| StoreError::Internal(format!("member record: {e}")))?;
    call(
        &shared.metrics,
        limit,
        Op::Write,
        client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut [message]),
    )
    .await
    .map(|_| ())
}

async fn heartbeat_loop(shared: Arc<Shared>, client: Arc<IggyClient>, payload: Vec<u8>) {
    let mut tick = tokio::time::interval(shared.settings.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut failures = RateLimited::default();
    loop {
        tick.tick().await;
        if shared.fenced.load(Ordering::Acquire) || shared.left.load(Ordering::Acquire) {
            return;
        }
        // Expiry runs here too, so the view ages while the tail waits on Iggy.
        shared.publish();
        if !shared.holds_lease() {
            shared.publish();
            tracing::warn!(
                node_id = shared.me.node_id,
                epoch = shared.me.epoch,
                "this gateway's lease lapsed (no heartbeat acknowledged in time): it leaves and must join again"
            );
            if let Ok(payload) = serde_json::to_vec(&shared.leave_record())
                && let Err(e) = append(&shared, &client, &payload, shared.call_timeout).await
            {
                tracing::warn!(error = %e, "members log: leave record not written");
            }
            return;
        }
        // Bounded by one interval, so a stuck send does not delay the next heartbeat.
        if let Err(e) = heartbeat(&shared, &client, &payload).await
            && let Some(suppressed) = failures.tick(Instant::now())
        {
            tracing::warn!(error = %e, suppressed, "member heartbeat not acknowledged");
        }
    }
}

async fn tail_loop(shared: Arc<Shared>, client: IggyClient, mut next: u64) {
    let pause = (shared.settings.heartbeat_interval / 4).max(Duration::from_millis(10));
    let mut unknown = RateLimited::default();
    let mut unreadable = RateLimited::default();
    let mut unproven = RateLimited::default();
    let mut failures = RateLimited::default();
    let (Ok(s), Ok(t)) = (named(&shared.stream), named(MEMBERS_TOPIC)) else {
        return;
    };
    loop {
        let started = Instant::now();
        let polled = call(
            &shared.metrics,
            shared.call_timeout,
            Op::Read,
            polled::poll_checked(&client, &s, &t, 0, &PollingStrategy::offset(next), PAGE),
        )
        .await;
        let mut more = false;
        match polled {
            Ok(polled) => {
                let now = Instant::now();
                more = polled.messages.len() == PAGE as usize;
                if !more && let Ok(mut caught_up) = shared.caught_up.lock() {
                    *caught_up = Some(started);
                }
                if let Ok(mut state) = shared.state.lock() {
                    for m in &polled.messages {
                        next = m.header.offset + 1;
                        if !proven(&shared.proof, &shared.metrics, m) {
                            if let Some(suppressed) = unproven.tick(now) {
                                tracing::warn!(
                                    suppressed,
                                    offset = m.header.offset,
                                    "members log: ignored a record without a valid proof that \
                                     a gateway wrote it (another Iggy user can write the meta \
                                     stream, or the gateways' meta secrets differ)"
                                );
                            }
                            continue;
                        }
                        match state.observe(&m.payload, now) {
                            Observed::UnknownNode => {
                                if let Some(suppressed) = unknown.tick(now) {
                                    tracing::warn!(
                                        suppressed,
                                        "members log: skipped a record of a node id outside the broker list"
                                    );
                                }
                            }
                            Observed::Unreadable => {
                                if let Some(suppressed) = unreadable.tick(now) {
                                    tracing::warn!(
                                        suppressed,
                                        "members log: skipped a record too large or not readable"
                                    );
                                }
                            }
                            Observed::Fenced => {
                                shared.fenced.store(true, Ordering::Release);
                                tracing::warn!(
                                    node_id = shared.me.node_id,
                                    epoch = shared.me.epoch,
                                    "a newer start of this node id joined: this gateway is fenced and gives up its lease"
                                );
                            }
                            Observed::Changed | Observed::Unchanged => {}
                        }
                    }
                }
            }
            Err(e) => {
                if let Some(suppressed) = failures.tick(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "members log: cannot read");
                }
            }
        }
        shared.publish();
        if shared.left.load(Ordering::Acquire) {
            return;
        }
        if !more {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Past its lease, whether a gateway may act as an owner (see the module docs): its join
/// wait is over (`since_join`: time since its first heartbeat was acknowledged) and its
/// view is fresh (`since_caught_up`: time since the start of its last read that reached
/// the log's end).
fn may_own(
    settings: &JoinSettings,
    since_join: Option<Duration>,
    since_caught_up: Option<Duration>,
) -> bool {
    let wait = settings.view_max_age + settings.lease_margin;
    since_join.is_some_and(|d| d >= wait)
        && since_caught_up.is_some_and(|d| d < settings.view_max_age)
}

impl Shared {
    fn holds_lease(&self) -> bool {
        if self.fenced.load(Ordering::Acquire)
            || self.left.load(Ordering::Acquire)
            || self.lapsed.load(Ordering::Acquire)
        {
            return false;
        }
        let lease = self
            .settings
            .session_timeout
            .saturating_sub(self.settings.lease_margin);
        let held = self
            .last_ack_sent
            .lock()
            .ok()
            .and_then(|t| *t)
            .is_some_and(|t| t.elapsed() < lease);
        if !held {
            self.lapsed.store(true, Ordering::Release);
        }
        held
    }

    /// Whether this gateway may act as an owner now: it holds its lease, its join wait is
    /// over and its view is fresh (see the module docs).
    fn acts_as_owner(&self) -> bool {
        self.holds_lease() && self.settled()
    }

    /// Past its join wait, with a fresh view ([`may_own`] on this gateway's clocks).
    fn settled(&self) -> bool {
        let since =
            |at: &Mutex<Option<Instant>>| at.lock().ok().and_then(|t| *t).map(|t| t.elapsed());
        may_own(&self.settings, since(&self.joined), since(&self.caught_up))
    }

    fn leave_record(&self) -> MemberRecord {
        MemberRecord {
            node_id: self.me.node_id,
            epoch: self.me.epoch,
            listeners: Vec::new(),
            leave: true,
        }
    }

    /// Expires members and publishes the view if it changed.
    fn publish(&self) {
        let lease = self.holds_lease();
        let me = lease.then_some(&self.me);
        let owner = lease && self.settled();
        let flipped = self.published_owner.swap(owner, Ordering::AcqRel) != owner;
        let members = match self.state.lock() {
            Ok(mut state) => {
                state.expire(Instant::now(), self.settings.session_timeout);
                state.members(me)
            }
            Err(_) => return,
        };
        self.view.send_if_modified(|view| {
            if view.members == members && !flipped {
                return false;
            }
            *view = Arc::new(LiveView {
                members,
                version: view.version + 1,
            });
            true
        });
    }
}

impl IggyMembership {
    /// Leaves at once: writes a leave record (the others drop this gateway when they
    /// read it), stops heartbeating and gives up the lease.
    pub async fn leave(&self) -> Result<(), BridgeError> {
        self.shared.left.store(true, Ordering::Release);
        for t in &self.tasks {
            t.abort();
        }
        let payload = serde_json::to_vec(&self.shared.leave_record())
            .map_err(|e| BridgeError::Setup(format!("leave record: {e}")))?;
        self.shared.publish();
        append(
            &self.shared,
            &self.writer,
            &payload,
            self.shared.call_timeout,
        )
        .await
        .map_err(|e| BridgeError::Setup(format!("leave record: {e}")))
    }

    /// Whether a newer start of this node id fenced this one.
    pub fn fenced(&self) -> bool {
        self.shared.fenced.load(Ordering::Acquire)
    }

    /// Whether this start's lease ran out (it must join again to be a member).
    pub fn lapsed(&self) -> bool {
        self.shared.lapsed.load(Ordering::Acquire)
    }
}

impl Membership for IggyMembership {
    fn me(&self) -> &Member {
        &self.shared.me
    }

    fn view(&self) -> Arc<LiveView> {
        self.shared.view.borrow().clone()
    }

    fn subscribe(&self) -> watch::Receiver<Arc<LiveView>> {
        self.shared.view.subscribe()
    }

    fn holds_lease(&self) -> bool {
        self.shared.holds_lease()
    }

    fn acts_as_owner(&self) -> bool {
        self.shared.acts_as_owner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(node: i32, epoch: u64) -> Vec<u8> {
        serde_json::to_vec(&MemberRecord {
            node_id: node,
            epoch,
            listeners: vec![ListenerRecord {
                name: "PLAINTEXT".into(),
                host: format!("h{node}"),
                port: 9092,
            }],
            leave: false,
        })
        .unwrap()
    }

    fn leave(node: i32, epoch: u64) -> Vec<u8> {
        serde_json::to_vec(&MemberRecord {
            node_id: node,
            epoch,
            listeners: vec![],
            leave: true,
        })
        .unwrap()
    }

    fn ids(v: &ViewState) -> Vec<(i32, u64)> {
        v.members(None)
            .iter()
            .map(|m| (m.node_id, m.epoch))
            .collect()
    }

    #[test]
    fn heartbeats_make_members_and_newer_epochs_replace_older() {
        let t = Instant::now();
        let mut v = ViewState::new(1, 5, &[1, 2, 3], 1024);
        assert_eq!(v.observe(&beat(2, 7), t), Observed::Changed);
        assert_eq!(v.observe(&beat(3, 1), t), Observed::Changed);
        assert_eq!(v.observe(&beat(2, 7), t), Observed::Unchanged);
        assert_eq!(ids(&v), vec![(2, 7), (3, 1)]);
        assert_eq!(v.observe(&beat(2, 9), t), Observed::Changed);
        assert_eq!(v.observe(&beat(2, 7), t), Observed::Unchanged);
        assert_eq!(ids(&v), vec![(2, 9), (3, 1)]);
        assert_eq!(v.members(None)[0].listeners[0].host, "h2");
    }

    #[test]
    fn leave_removes_at_once_and_only_a_newer_epoch_comes_back() {
        let t = Instant::now();
        let mut v = ViewState::new(1, 5, &[1, 2], 1024);
        v.observe(&beat(2, 7), t);
        assert_eq!(v.observe(&leave(2, 6), t), Observed::Unchanged);
        assert_eq!(ids(&v), vec![(2, 7)]);
        assert_eq!(v.observe(&leave(2, 7), t), Observed::Changed);
        assert!(ids(&v).is_empty());
        assert_eq!(v.observe(&beat(2, 7), t), Observed::Unchanged);
        assert!(ids(&v).is_empty());
        assert_eq!(v.observe(&beat(2, 8), t), Observed::Changed);
        assert_eq!(ids(&v), vec![(2, 8)]);
    }

    #[test]
    fn members_expire_a_session_timeout_after_their_last_observed_heartbeat() {
        let t = Instant::now();
        let session = Duration::from_secs(10);
        let mut v = ViewState::new(1, 5, &[1, 2, 3], 1024);
        v.observe(&beat(2, 1), t);
        v.observe(&beat(3, 1), t);
        v.observe(&beat(3, 1), t + Duration::from_secs(6));
        assert!(!v.expire(t + Duration::from_secs(9), session));
        assert!(v.expire(t + Duration::from_secs(10), session));
        assert_eq!(ids(&v), vec![(3, 1)]);
        assert!(v.expire(t + Duration::from_secs(16), session));
        assert!(ids(&v).is_empty());
        // A later heartbeat of the same epoch does not revive an expired member; a
        // newer epoch (the node joined again) does.
        assert_eq!(
            v.observe(&beat(3, 1), t + Duration::from_secs(17)),
            Observed::Unchanged
        );
        assert!(ids(&v).is_empty());
        assert_eq!(
            v.observe(&beat(3, 2), t + Duration::from_secs(17)),
            Observed::Changed
        );
    }

    #[test]
    fn own_node_id_is_ignored_unless_newer_which_fences() {
        let t = Instant::now();
        let mut v = ViewState::new(1, 5, &[1, 2], 1024);
        assert_eq!(v.observe(&beat(1, 4), t), Observed::Unchanged);
        assert_eq!(v.observe(&beat(1, 5), t), Observed::Unchanged);
        assert!(!v.fenced());
        assert!(ids(&v).is_empty());
        assert_eq!(v.observe(&beat(1, 6), t), Observed::Fenced);
        assert!(v.fenced());
        assert_eq!(v.observe(&beat(1, 7), t), Observed::Unchanged);
        let me = Member {
            node_id: 1,
            epoch: 5,
            listeners: vec![],
        };
        v.observe(&beat(2, 1), t);
        assert_eq!(
            v.members(Some(&me))
                .iter()
                .map(|m| m.node_id)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn unknown_nodes_large_and_garbled_records_are_skipped() {
        let t = Instant::now();
        let mut v = ViewState::new(1, 5, &[1, 2], 64);
        assert_eq!(v.observe(&beat(9, 1), t), Observed::UnknownNode);
        assert_eq!(v.observe(b"{not json", t), Observed::Unreadable);
        assert_eq!(v.observe(&[b' '; 65], t), Observed::Unreadable);
        assert_eq!(v.observe(br#"{"n":2}"#, t), Observed::Unreadable);
        assert!(ids(&v).is_empty());
        assert_eq!(v.observe(br#"{"n":2,"e":3}"#, t), Observed::Changed);
    }

    #[test]
    fn a_joiner_waits_and_a_stale_view_owns_nothing() {
        let s = JoinSettings::new(
            1,
            Vec::new(),
            vec![1, 2],
            Duration::from_millis(500),
            Duration::from_millis(5000),
        );
        let ms = |n: u64| Some(Duration::from_millis(n));
        // The wait: two heartbeat intervals of view age plus the lease margin.
        assert!(!may_own(&s, None, ms(0)));
        assert!(!may_own(&s, ms(1499), ms(10)));
        assert!(may_own(&s, ms(1500), ms(10)));
        // A view whose last complete read started a view age ago or more.
        assert!(may_own(&s, ms(60_000), ms(999)));
        assert!(!may_own(&s, ms(60_000), ms(1000)));
        assert!(!may_own(&s, ms(60_000), None));
    }

    #[test]
    fn settings_are_checked() {
        let ok = JoinSettings::new(
            1,
            vec![],
            vec![1, 2],
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        assert!(ok.validate().is_ok());
        assert!(
            JoinSettings {
                node_id: 3,
                ..ok.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            JoinSettings {
                heartbeat_interval: Duration::from_secs(4),
                ..ok.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            JoinSettings {
                lease_margin: Duration::from_secs(9),
                ..ok.clone()
            }
            .validate()
            .is_err()
        );
        for age in [Duration::from_millis(499), Duration::from_secs(10)] {
            assert!(
                JoinSettings {
                    view_max_age: age,
                    ..ok.clone()
                }
                .validate()
                .is_err()
            );
        }
        assert!(ok.window() >= 2 * 10 * 2);
    }

    #[test]
    fn warnings_are_rate_limited() {
        let t = Instant::now();
        let mut w = RateLimited::default();
        assert_eq!(w.tick(t), Some(0));
        assert_eq!(w.tick(t + Duration::from_secs(1)), None);
        assert_eq!(w.tick(t + Duration::from_secs(2)), None);
        assert_eq!(w.tick(t + WARN_EVERY + Duration::from_secs(1)), Some(2));
    }
}
