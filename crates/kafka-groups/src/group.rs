//! One group's state machine: Kafka's `GroupMetadata` plus the parts of `GroupCoordinator`
//! that act on a single group (join, sync, heartbeat, leave, expiry, rebalance).
//!
//! Method names follow Kafka's (`prepare_rebalance`, `complete_join`, `maybe_elect_new_joined_leader`)
//! so the two can be read side by side.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ErrorCode;

use crate::member_id::{MAX_ID_PREFIX_BYTES, MemberIds, truncated};
use crate::snapshot::{GroupSnapshot, MemberSnapshot, StateError};
use crate::timers::{TimerKind, Timers};
use crate::types::{
    GroupConfig, GroupDescription, GroupState, HeartbeatResponse, JoinGroup, JoinResponse,
    JoinedMember, LeaveResponse, LeavingMember, MemberAssignment, MemberDescription,
    MemberLeaveResult, Millis, Protocol, RequestId, Response, SyncGroup, SyncResponse,
};

/// Log through `tracing` when the feature is on; otherwise compile the arguments away.
macro_rules! log {
    ($($arg:tt)*) => {{
        #[cfg(feature = "tracing")]
        ::tracing::debug!($($arg)*);
        #[cfg(not(feature = "tracing"))]
        if false {
            let _ = ::std::format!($($arg)*);
        }
    }};
}

/// What every group shares: configuration, the timer set, the outbox and the id generator.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) config: GroupConfig,
    pub(crate) timers: Timers,
    pub(crate) out: std::collections::VecDeque<(RequestId, Response)>,
    pub(crate) ids: MemberIds,
    /// Generations completed over all groups since the coordinator started.
    pub(crate) rebalances: u64,
    /// Bytes of protocol metadata and assignments held by every member of every group
    /// (see [`Member::bytes`]), checked against `max_state_bytes`.
    pub(crate) state_bytes: usize,
    /// KIP-394 ids outstanding over all groups, checked against `max_pending_members`.
    pub(crate) pending_total: usize,
    /// Durable states to write, per group: the latest replaces an unwritten earlier one
    /// (`None`: delete). Bounded by the groups held plus those forgotten since the last
    /// poll.
    pub(crate) persist: BTreeMap<String, Option<GroupSnapshot>>,
}

impl Ctx {
    fn respond(&mut self, id: RequestId, response: Response) {
        self.out.push_back((id, response));
    }

    pub(crate) fn join_error(&mut self, id: RequestId, member_id: String, error: ErrorCode) {
        self.respond(id, Response::Join(join_error(member_id, error)));
    }

    pub(crate) fn sync_error(&mut self, id: RequestId, error: ErrorCode) {
        self.respond(id, Response::Sync(sync_error(error)));
    }

    pub(crate) fn heartbeat(&mut self, id: RequestId, error: ErrorCode) {
        self.respond(id, Response::Heartbeat(HeartbeatResponse { error }));
    }

    pub(crate) fn leave(&mut self, id: RequestId, response: LeaveResponse) {
        self.respond(id, Response::Leave(response));
    }
}

fn join_error(member_id: String, error: ErrorCode) -> JoinResponse {
    JoinResponse::failed(member_id, error)
}

fn sync_error(error: ErrorCode) -> SyncResponse {
    SyncResponse::failed(error)
}

/// What one member costs besides the bytes a client chose the size of, counted against
/// `max_state_bytes` so that the member count over all groups is bounded too.
pub(crate) const MEMBER_OVERHEAD: usize = 256;

/// Bytes of protocol names and metadata.
pub(crate) fn protocol_bytes(protocols: &[Protocol]) -> usize {
    protocols
        .iter()
        .map(|p| p.name.len() + p.metadata.len())
        .sum()
}

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    /// In the member's preference order.
    protocols: Vec<Protocol>,
    assignment: Bytes,
    /// A JoinGroup waiting for the rebalance to complete.
    pub(crate) awaiting_join: Option<RequestId>,
    /// A SyncGroup waiting for the leader's assignment.
    pub(crate) awaiting_sync: Option<RequestId>,
    /// Has not yet received a JoinGroup answer; such members expire even while waiting.
    is_new: bool,
    /// The generation whose JoinGroup answer included this member.
    pub(crate) generation: i32,
    pub(crate) session_deadline: Option<Millis>,
}

impl Member {
    /// What the member costs the coordinator, roughly: its ids, protocol names and
    /// metadata, assignment, and [`MEMBER_OVERHEAD`] for the rest (the entry, its timer).
    pub(crate) fn bytes(&self) -> usize {
        MEMBER_OVERHEAD
            + self.id.len()
            + self.instance_id.as_ref().map_or(0, String::len)
            + self.client_id.len()
            + self.client_host.len()
            + protocol_bytes(&self.protocols)
            + self.assignment.len()
    }

    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p.name == protocol)
    }

    /// Whether a session deadline may pass without removing the member. Members parked in
    /// JoinGroup or SyncGroup cannot heartbeat on that connection, so they are spared, unless
    /// they are new: a new member that never gets its answer is a client that gave up.
    fn heartbeat_satisfied(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }
}

/// The initial rebalance delay of an empty group (Kafka's `InitialDelayedJoin`).
#[derive(Debug)]
struct InitialDelay {
    /// What is left of the rebalance timeout for further extensions.
    remaining: Duration,
    /// A member joined since the delay was last armed: extend once more.
    new_member_added: bool,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) id: String,
    pub(crate) state: GroupState,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol_name: Option<String>,
    pub(crate) leader: Option<String>,
    /// Ordered by member id, so iteration (and leader re-election) is deterministic.
    pub(crate) members: BTreeMap<String, Member>,
    /// `group.instance.id` -> member id.
    pub(crate) static_members: HashMap<String, String>,
    /// KIP-394 ids handed out and not yet used, with their expiry.
    pub(crate) pending: BTreeMap<String, Option<Millis>>,
    /// Members that have not sent SyncGroup since the last rebalance completed.
    pub(crate) pending_sync: BTreeSet<String>,
    initial_delay: Option<InitialDelay>,
    pub(crate) join_deadline: Option<Millis>,
    pub(crate) sync_deadline: Option<Millis>,
    /// When the group last became Empty: the longest-empty group is evicted first.
    pub(crate) empty_since: Millis,
}

impl Group {
    pub(crate) fn new(id: String, now: Millis) -> Self {
        Self {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            initial_delay: None,
            join_deadline: None,
            sync_deadline: None,
            empty_since: now,
        }
    }

    /// Never completed a rebalance and holds nobody: a group that a failed JoinGroup created
    /// or whose only KIP-394 id expired. Dropped so that bad input cannot fill `max_groups`.
    pub(crate) fn is_unused(&self) -> bool {
        self.state == GroupState::Empty
            && self.generation == 0
            && self.members.is_empty()
            && self.pending.is_empty()
    }

    /// Disarms every deadline and gives back what the group counted against the
    /// coordinator-wide caps; the group is about to be forgotten.
    pub(crate) fn disarm_all(&mut self, ctx: &mut Ctx) {
        ctx.pending_total = ctx.pending_total.saturating_sub(self.pending.len());
        let bytes: usize = self.members.values().map(Member::bytes).sum();
        ctx.state_bytes = ctx.state_bytes.saturating_sub(bytes);
        ctx.timers
            .set(&mut self.join_deadline, &self.id, TimerKind::Join, None);
        ctx.timers
            .set(&mut self.sync_deadline, &self.id, TimerKind::Sync, None);
        for (id, slot) in &mut self.pending {
            ctx.timers
                .set(slot, &self.id, TimerKind::Pending(id.clone()), None);
        }
        for (id, m) in &mut self.members {
            ctx.timers.set(
                &mut m.session_deadline,
                &self.id,
                TimerKind::Session(id.clone()),
                None,
            );
        }
    }

    // ----- timers -------------------------------------------------------------------------

    fn set_join_timer(&mut self, ctx: &mut Ctx, at: Option<Millis>) {
        ctx.timers
            .set(&mut self.join_deadline, &self.id, TimerKind::Join, at);
    }

    fn set_sync_timer(&mut self, ctx: &mut Ctx, at: Option<Millis>) {
        ctx.timers
            .set(&mut self.sync_deadline, &self.id, TimerKind::Sync, at);
    }

    /// Kafka's `completeAndScheduleNextHeartbeatExpiration`: the member has shown life.
    fn schedule_session(&mut self, ctx: &mut Ctx, now: Millis, member_id: &str) {
        if let Some(m) = self.members.get_mut(member_id) {
            let at = now + m.session_timeout;
            ctx.timers.set(
                &mut m.session_deadline,
                &self.id,
                TimerKind::Session(member_id.to_owned()),
                Some(at),
            );
        }
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx, now: Millis, kind: TimerKind) {
        match kind {
            TimerKind::Join => {
                self.join_deadline = None;
                self.on_join_deadline(ctx, now);
            }
            TimerKind::Sync => {
                self.sync_deadline = None;
                self.on_sync_deadline(ctx, now);
            }
            TimerKind::Session(member_id) => {
                let Some(m) = self.members.get_mut(&member_id) else {
                    return;
                };
                m.session_deadline = None;
                if !m.heartbeat_satisfied() {
                    log!(
                        "group {}: member {} failed its session, removing it",
                        self.id,
                        member_id
                    );
                    self.remove_member_and_update_group(ctx, now, &member_id);
                }
                // A satisfied member is re-armed when its JoinGroup or SyncGroup is answered.
            }
            TimerKind::Pending(member_id) => {
                if self.pending.remove(&member_id).is_some() {
                    ctx.pending_total = ctx.pending_total.saturating_sub(1);
                    log!("group {}: pending member {} expired", self.id, member_id);
                    if self.state == GroupState::PreparingRebalance {
                        self.maybe_complete_join(ctx, now);
                    }
                }
            }
        }
    }

    fn on_join_deadline(&mut self, ctx: &mut Ctx, now: Millis) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(delay) = &mut self.initial_delay
            && delay.new_member_added
            && !delay.remaining.is_zero()
        {
            // Members are still arriving: wait another delay, within the rebalance timeout.
            delay.new_member_added = false;
            let step = ctx.config.initial_rebalance_delay.min(delay.remaining);
            delay.remaining = delay.remaining.saturating_sub(step);
            self.set_join_timer(ctx, Some(now + step));
            return;
        }
        self.complete_join(ctx, now);
    }

    /// Kafka's `onExpirePendingSync`: members that got their JoinGroup answer but never sent
    /// SyncGroup within the rebalance timeout are gone; the rest rebalance without them.
    fn on_sync_deadline(&mut self, ctx: &mut Ctx, now: Millis) {
        if !matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) {
            return;
        }
        let missing: Vec<String> = std::mem::take(&mut self.pending_sync).into_iter().collect();
        log!(
            "group {}: removing {:?} for not sending SyncGroup",
            self.id,
            missing
        );
        for id in &missing {
            self.remove_member(ctx, id);
        }
        self.prepare_rebalance(ctx, now);
    }

    // ----- membership ---------------------------------------------------------------------

    fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    fn is_static_member_fenced(&self, instance_id: Option<&str>, member_id: &str) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|current| current != member_id)
    }

    /// Kafka's `validateCurrentMember`.
    fn validate_current_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if self.is_static_member_fenced(instance_id, member_id) {
            Err(ErrorCode::FENCED_INSTANCE_ID)
        } else if !self.members.contains_key(member_id) {
            Err(ErrorCode::UNKNOWN_MEMBER_ID)
        } else {
            Ok(())
        }
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty type and protocol
    /// list; otherwise the type must match and one protocol must be supported by everyone.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| {
                self.members
                    .values()
                    .filter(|m| m.supports(&p.name))
                    .count()
                    == self.members.len()
            })
    }

    /// Kafka's `selectProtocol`: among the protocols every member supports, each member
    /// votes for its most preferred; most votes wins. Kafka breaks ties arbitrarily (hash
    /// order); here the smallest name wins, to stay deterministic.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(p) = m
                .protocols
                .iter()
                .find(|p| candidates.contains(&p.name.as_str()))
            {
                *votes.entry(p.name.as_str()).or_default() += 1;
            }
        }
        // `max_by_key` keeps the last maximum; iterate in reverse so the smallest name wins.
        votes
            .into_iter()
            .rev()
            .max_by_key(|(_, n)| *n)
            .map(|(name, _)| name.to_owned())
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    fn has_all_members_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    /// Kafka's `acceptJoiningMember`. While preparing, awaiting members are counted rather
    /// than members, so members that will not rejoin do not hold seats; this lets the group
    /// briefly hold up to twice `max` members, until the rebalance removes the stragglers.
    fn accept_joining_member(&self, member_id: &str, max: usize) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || self.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max
            }
        }
    }

    fn add_member(&mut self, ctx: &mut Ctx, member: Member) {
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        self.forget_pending(ctx, &member.id);
        ctx.state_bytes += member.bytes();
        self.members.insert(member.id.clone(), member);
    }

    /// Drops a KIP-394 id and its expiry; `false` if it was not outstanding.
    fn forget_pending(&mut self, ctx: &mut Ctx, member_id: &str) -> bool {
        match self.pending.remove(member_id) {
            Some(mut slot) => {
                ctx.pending_total = ctx.pending_total.saturating_sub(1);
                let kind = TimerKind::Pending(member_id.to_owned());
                ctx.timers.set(&mut slot, &self.id, kind, None);
                true
            }
            None => false,
        }
    }

    /// Removes a member and answers whatever it is waiting for: it is no longer a member,
    /// and every request gets exactly one answer. Kafka answers a pending JoinGroup this way
    /// (with no member id, so the client starts over).
    fn remove_member(&mut self, ctx: &mut Ctx, member_id: &str) -> Option<Member> {
        let mut m = self.members.remove(member_id)?;
        ctx.state_bytes = ctx.state_bytes.saturating_sub(m.bytes());
        ctx.timers.set(
            &mut m.session_deadline,
            &self.id,
            TimerKind::Session(member_id.to_owned()),
            None,
        );
        if let Some(id) = m.awaiting_join.take() {
            ctx.join_error(id, String::new(), ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if let Some(id) = m.awaiting_sync.take() {
            ctx.sync_error(id, ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if let Some(instance) = &m.instance_id {
            self.static_members.remove(instance);
        }
        if self.pending_sync.remove(member_id) && self.pending_sync.is_empty() {
            self.set_sync_timer(ctx, None);
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(m)
    }

    fn remove_member_and_update_group(&mut self, ctx: &mut Ctx, now: Millis, member_id: &str) {
        if self.remove_member(ctx, member_id).is_none() {
            return;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(ctx, now);
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(ctx, now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    // ----- rebalance ----------------------------------------------------------------------

    fn maybe_prepare_rebalance(&mut self, ctx: &mut Ctx, now: Millis) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            self.prepare_rebalance(ctx, now);
        }
    }

    fn prepare_rebalance(&mut self, ctx: &mut Ctx, now: Millis) {
        if self.state == GroupState::CompletingRebalance {
            // Assignments computed for the old member set are void; waiting syncs rejoin.
            self.reset_and_propagate_assignment_error(ctx, now, ErrorCode::REBALANCE_IN_PROGRESS);
        }
        self.pending_sync.clear();
        self.set_sync_timer(ctx, None);

        let delay = ctx.config.initial_rebalance_delay;
        if self.state == GroupState::Empty && !delay.is_zero() {
            self.initial_delay = Some(InitialDelay {
                remaining: self.rebalance_timeout().saturating_sub(delay),
                new_member_added: false,
            });
            self.set_join_timer(ctx, Some(now + delay));
        } else {
            self.initial_delay = None;
            let at = now + self.rebalance_timeout();
            self.set_join_timer(ctx, Some(at));
        }
        log!(
            "group {}: preparing rebalance from {} (generation {})",
            self.id,
            self.state,
            self.generation
        );
        self.state = GroupState::PreparingRebalance;
        self.maybe_complete_join(ctx, now);
    }

    /// Kafka's `DelayedJoin.tryComplete`. The initial delay never completes early: its point
    /// is to wait for members that have not arrived yet.
    fn maybe_complete_join(&mut self, ctx: &mut Ctx, now: Millis) {
        if self.state == GroupState::PreparingRebalance
            && self.initial_delay.is_none()
            && self.has_all_members_joined()
        {
            self.complete_join(ctx, now);
        }
    }

    /// Kafka's `maybeElectNewJoinedLeader`: a leader that did not rejoin cannot assign.
    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = &self.leader else {
            return false;
        };
        if self
            .members
            .get(leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join.is_some()) {
            Some(m) => {
                self.leader = Some(m.id.clone());
                true
            }
            None => false,
        }
    }

    /// Kafka's `onCompleteJoin`.
    fn complete_join(&mut self, ctx: &mut Ctx, now: Millis) {
        self.set_join_timer(ctx, None);
        self.initial_delay = None;

        // Dynamic members that did not rejoin are gone. Static ones stay: KIP-345 lets them
        // be absent for up to a session timeout without a rebalance.
        let stragglers: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in &stragglers {
            log!("group {}: member {} did not rejoin in time", self.id, id);
            self.remove_member(ctx, id);
        }

        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Only absent static members remain. Wait another rebalance timeout; their
            // sessions will expire meanwhile unless they come back.
            let at = now + self.rebalance_timeout();
            self.set_join_timer(ctx, Some(at));
            return;
        }

        // Generation ids are int32 on the wire; after i32::MAX start again at 1 rather than
        // at negative values, which clients read as "no generation".
        self.generation = if self.generation == i32::MAX {
            1
        } else {
            self.generation + 1
        };
        ctx.rebalances += 1;
        self.pending_sync.clear();
        if self.members.is_empty() {
            self.protocol_name = None;
            self.state = GroupState::Empty;
            self.empty_since = now;
            log!("group {}: empty at generation {}", self.id, self.generation);
            self.persist(ctx);
            return;
        }
        self.protocol_name = self.select_protocol();
        self.state = GroupState::CompletingRebalance;
        log!(
            "group {}: generation {} with {} members, protocol {:?}, leader {:?}",
            self.id,
            self.generation,
            self.members.len(),
            self.protocol_name,
            self.leader
        );

        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in &ids {
            let response = self.join_ok(id);
            if let Some(m) = self.members.get_mut(id) {
                m.generation = self.generation;
                m.is_new = false;
                if let Some(request) = m.awaiting_join.take() {
                    ctx.respond(request, Response::Join(response));
                }
            }
            self.schedule_session(ctx, now, id);
            self.pending_sync.insert(id.clone());
        }
        let at = now + self.rebalance_timeout();
        self.set_sync_timer(ctx, Some(at));
    }

    /// The successful JoinGroup answer for `member_id` in the current generation.
    fn join_ok(&self, member_id: &str) -> JoinResponse {
        let is_leader = self.leader.as_deref() == Some(member_id);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        JoinResponse {
            error: ErrorCode::NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment: false,
            member_id: member_id.to_owned(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| JoinedMember {
                        member_id: m.id.clone(),
                        group_instance_id: m.instance_id.clone(),
                        metadata: m.metadata(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn reset_and_propagate_assignment_error(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        error: ErrorCode,
    ) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in &ids {
            if let Some(m) = self.members.get_mut(id) {
                ctx.state_bytes = ctx.state_bytes.saturating_sub(m.assignment.len());
                m.assignment = Bytes::new();
                if let Some(request) = m.awaiting_sync.take() {
                    ctx.sync_error(request, error);
                }
            }
            // As Kafka: a session that lapsed while the member waited was ignored, so the
            // next deadline starts now.
            self.schedule_session(ctx, now, id);
        }
    }

    fn set_and_propagate_assignment(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        mut assignments: HashMap<String, Bytes>,
    ) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in &ids {
            if let Some(m) = self.members.get_mut(id) {
                ctx.state_bytes = ctx.state_bytes.saturating_sub(m.assignment.len());
                m.assignment = assignments.remove(id).unwrap_or_default();
                ctx.state_bytes += m.assignment.len();
                if let Some(request) = m.awaiting_sync.take() {
                    let response = SyncResponse {
                        error: ErrorCode::NONE,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    };
                    ctx.respond(request, Response::Sync(response));
                }
            }
            self.schedule_session(ctx, now, id);
        }
    }

    fn remove_pending_sync(&mut self, ctx: &mut Ctx, member_id: &str) {
        if self.pending_sync.remove(member_id) && self.pending_sync.is_empty() {
            self.set_sync_timer(ctx, None);
        }
    }

    // ----- JoinGroup ----------------------------------------------------------------------

    /// `protocols` is `req.protocols` already de-duplicated and checked against the caps.
    pub(crate) fn join(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        req: JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        // A static member restarting takes its old incarnation's seat rather than a new one,
        // so a full group still lets it back in. (Kafka counts it as a newcomer and refuses
        // it with GROUP_MAX_SIZE_REACHED, which defeats KIP-345 exactly when the group is
        // full.)
        let replacing_static = req.member_id.is_empty()
            && req
                .group_instance_id
                .as_ref()
                .is_some_and(|i| self.static_members.contains_key(i));
        if !replacing_static
            && !self.accept_joining_member(&req.member_id, ctx.config.max_members_per_group)
        {
            // As Kafka: a known member that no longer fits is dropped, so the group shrinks
            // back under the cap at the next rebalance.
            self.remove_member(ctx, &req.member_id);
            self.forget_pending(ctx, &req.member_id);
            ctx.join_error(id, String::new(), ErrorCode::GROUP_MAX_SIZE_REACHED);
        } else if req.member_id.is_empty() {
            self.join_new_member(ctx, now, id, req, protocols);
        } else {
            self.join_current_member(ctx, now, id, req, protocols);
        }
        if self.state == GroupState::PreparingRebalance {
            self.maybe_complete_join(ctx, now);
        }
    }

    fn join_new_member(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        req: JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        if !self.supports_protocols(&req.protocol_type, &protocols) {
            ctx.join_error(id, String::new(), ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
            return;
        }
        match req.group_instance_id.clone() {
            Some(instance) => {
                let new_id = self.fresh_member_id(ctx, &instance);
                match self.static_members.get(&instance).cloned() {
                    Some(old_id) => {
                        self.replace_static_member(ctx, now, id, &old_id, new_id, req, protocols);
                    }
                    None => self.add_member_and_rebalance(ctx, now, id, new_id, req, protocols),
                }
            }
            None => {
                let new_id = self.fresh_member_id(ctx, &req.client_id);
                if req.require_known_member_id {
                    if self.pending.len() >= ctx.config.max_pending_members_per_group {
                        ctx.join_error(id, String::new(), ErrorCode::GROUP_MAX_SIZE_REACHED);
                        return;
                    }
                    if ctx.pending_total >= ctx.config.max_pending_members {
                        ctx.join_error(id, String::new(), ErrorCode::COORDINATOR_NOT_AVAILABLE);
                        return;
                    }
                    // KIP-394: hand out an id and wait for the member to come back with it;
                    // a client that never does costs one entry for one session timeout.
                    let mut slot = None;
                    ctx.timers.set(
                        &mut slot,
                        &self.id,
                        TimerKind::Pending(new_id.clone()),
                        Some(now + req.session_timeout),
                    );
                    self.pending.insert(new_id.clone(), slot);
                    ctx.pending_total += 1;
                    ctx.join_error(id, new_id, ErrorCode::MEMBER_ID_REQUIRED);
                } else {
                    self.add_member_and_rebalance(ctx, now, id, new_id, req, protocols);
                }
            }
        }
    }

    /// A member id this group does not use. Ids from one generator never repeat, but a
    /// group restored from another coordinator holds ids from another generator, which
    /// may be seeded alike; each try is a new id, so this ends within members + pending
    /// tries.
    fn fresh_member_id(&self, ctx: &mut Ctx, prefix: &str) -> String {
        loop {
            let id = ctx.ids.next(prefix);
            if !self.members.contains_key(&id) && !self.pending.contains_key(&id) {
                return id;
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        member_id: String,
        req: JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        if self.state == GroupState::PreparingRebalance
            && self.generation == 0
            && let Some(delay) = &mut self.initial_delay
        {
            delay.new_member_added = true;
        }
        if self.members.is_empty() {
            // The first member sets the type; `supports_protocols` holds later ones to it.
            self.protocol_type = Some(req.protocol_type.clone());
        }
        log!(
            "group {}: member {} joins in {} (reason: {:?})",
            self.id,
            member_id,
            self.state,
            req.reason
        );
        let member = Member {
            id: member_id.clone(),
            instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout: req.session_timeout,
            rebalance_timeout: req.rebalance_timeout,
            protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(id),
            awaiting_sync: None,
            is_new: true,
            generation: -1,
            session_deadline: None,
        };
        self.add_member(ctx, member);
        // A new member cannot heartbeat (it has no id yet) and a parked JoinGroup hides a
        // disconnect, so its JoinGroup itself times out.
        if let Some(m) = self.members.get_mut(&member_id) {
            ctx.timers.set(
                &mut m.session_deadline,
                &self.id,
                TimerKind::Session(member_id.clone()),
                Some(now + ctx.config.new_member_join_timeout),
            );
        }
        self.maybe_prepare_rebalance(ctx, now);
    }

    fn join_current_member(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        req: JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        let member_id = req.member_id.clone();
        if !self.supports_protocols(&req.protocol_type, &protocols) {
            ctx.join_error(id, member_id, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
            return;
        }
        if self.pending.contains_key(&member_id) {
            if req.group_instance_id.is_some() {
                // Pending ids go to dynamic members only; a static member presenting one is
                // confused (Kafka treats it as an internal error). Make it start over.
                ctx.join_error(id, member_id, ErrorCode::UNKNOWN_MEMBER_ID);
            } else {
                self.add_member_and_rebalance(ctx, now, id, member_id, req, protocols);
            }
            return;
        }
        let instance = req.group_instance_id.as_deref();
        if self.is_static_member_fenced(instance, &member_id) {
            ctx.join_error(id, member_id, ErrorCode::FENCED_INSTANCE_ID);
            return;
        }
        let instance_unknown = instance.is_some_and(|i| !self.static_members.contains_key(i));
        let Some(member) = self.members.get(&member_id) else {
            ctx.join_error(id, member_id, ErrorCode::UNKNOWN_MEMBER_ID);
            return;
        };
        if instance_unknown {
            ctx.join_error(id, member_id, ErrorCode::UNKNOWN_MEMBER_ID);
            return;
        }
        let unchanged = member.protocols == protocols;
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(ctx, now, id, &req, protocols);
            }
            GroupState::CompletingRebalance if unchanged => {
                // Most likely a retry of a JoinGroup whose answer was lost: answer again.
                let response = self.join_ok(&member_id);
                ctx.respond(id, Response::Join(response));
            }
            GroupState::Stable if unchanged && self.leader.as_deref() != Some(&member_id) => {
                let mut response = self.join_ok(&member_id);
                response.members.clear();
                ctx.respond(id, Response::Join(response));
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                // Changed metadata, or the leader asking for a rebalance (it does so when
                // topic metadata changes what it would assign).
                self.update_member_and_rebalance(ctx, now, id, &req, protocols);
            }
            GroupState::Empty | GroupState::Dead => {
                ctx.join_error(id, member_id, ErrorCode::UNKNOWN_MEMBER_ID);
            }
        }
    }

    fn update_member_and_rebalance(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        req: &JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        let Some(m) = self.members.get_mut(&req.member_id) else {
            return;
        };
        ctx.state_bytes = ctx.state_bytes.saturating_sub(m.bytes());
        m.protocols = protocols;
        ctx.state_bytes += m.bytes();
        m.rebalance_timeout = req.rebalance_timeout;
        m.session_timeout = req.session_timeout;
        if let Some(superseded) = m.awaiting_join.replace(id) {
            // The client retried (typically on a new connection); the old request's answer
            // goes nowhere useful but must still be given.
            ctx.join_error(
                superseded,
                req.member_id.clone(),
                ErrorCode::REBALANCE_IN_PROGRESS,
            );
        }
        self.maybe_prepare_rebalance(ctx, now);
    }

    /// KIP-345: a static member restarted (new process, no member id) while its old
    /// incarnation is still a member. The new id takes over the old one's place and
    /// assignment; the old id is fenced from now on.
    #[allow(clippy::too_many_arguments)]
    fn replace_static_member(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        id: RequestId,
        old_id: &str,
        new_id: String,
        req: JoinGroup,
        protocols: Vec<Protocol>,
    ) {
        let current_leader = self.leader.clone().unwrap_or_default();
        let Some(mut m) = self.members.remove(old_id) else {
            ctx.join_error(id, String::new(), ErrorCode::UNKNOWN_MEMBER_ID);
            return;
        };
        log!(
            "group {}: static member {:?} replaces {} with {}",
            self.id,
            req.group_instance_id,
            old_id,
            new_id
        );
        ctx.timers.set(
            &mut m.session_deadline,
            &self.id,
            TimerKind::Session(old_id.to_owned()),
            None,
        );
        // Whatever the old incarnation still waits for, it has been fenced.
        if let Some(old) = m.awaiting_join.take() {
            ctx.join_error(old, old_id.to_owned(), ErrorCode::FENCED_INSTANCE_ID);
        }
        if let Some(old) = m.awaiting_sync.take() {
            ctx.sync_error(old, ErrorCode::FENCED_INSTANCE_ID);
        }
        ctx.state_bytes = ctx.state_bytes.saturating_sub(m.bytes());
        m.id = new_id.clone();
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        m.session_timeout = req.session_timeout;
        m.rebalance_timeout = req.rebalance_timeout;
        m.protocols = protocols;
        if let Some(instance) = &m.instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        ctx.state_bytes += m.bytes();
        self.members.insert(new_id.clone(), m);
        self.schedule_session(ctx, now, &new_id);

        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol_name => {
                // No rebalance. The answer names the leader as it was, so that a replaced
                // leader does not compute an assignment a Stable group would never hand out;
                // SyncGroup then returns the carried-over assignment.
                let mut response = self.join_ok(&new_id);
                response.leader = current_leader;
                response.members.clear();
                ctx.respond(id, Response::Join(response));
                // The old id is fenced from now on, and a later owner must know it.
                self.persist(ctx);
            }
            GroupState::Stable
            | GroupState::CompletingRebalance
            | GroupState::PreparingRebalance => {
                // Completing: the leader may already be assigning to the old id, so the new
                // one would get nothing; rebalance. Preparing: just wait with everyone else.
                if let Some(m) = self.members.get_mut(&new_id) {
                    m.awaiting_join = Some(id);
                }
                if self.state == GroupState::CompletingRebalance {
                    self.prepare_rebalance(ctx, now);
                } else {
                    self.maybe_prepare_rebalance(ctx, now);
                }
            }
            GroupState::Empty | GroupState::Dead => {
                // A static member implies a non-empty group; answer rather than trust it.
                ctx.join_error(id, String::new(), ErrorCode::UNKNOWN_MEMBER_ID);
            }
        }
    }

    // ----- SyncGroup ----------------------------------------------------------------------

    pub(crate) fn sync(&mut self, ctx: &mut Ctx, now: Millis, id: RequestId, req: SyncGroup) {
        if let Err(e) =
            self.validate_current_member(&req.member_id, req.group_instance_id.as_deref())
        {
            return ctx.sync_error(id, e);
        }
        if req.generation_id != self.generation {
            return ctx.sync_error(id, ErrorCode::ILLEGAL_GENERATION);
        }
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| self.protocol_type.as_ref() != Some(t))
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| self.protocol_name.as_ref() != Some(n))
        {
            return ctx.sync_error(id, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                ctx.sync_error(id, ErrorCode::UNKNOWN_MEMBER_ID)
            }
            GroupState::PreparingRebalance => ctx.sync_error(id, ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(&req.member_id)
                    && let Some(superseded) = m.awaiting_sync.replace(id)
                {
                    ctx.sync_error(superseded, ErrorCode::REBALANCE_IN_PROGRESS);
                }
                self.remove_pending_sync(ctx, &req.member_id);
                if self.leader.as_deref() == Some(req.member_id.as_str()) {
                    self.accept_assignment(ctx, now, req.assignments);
                }
            }
            GroupState::Stable => {
                self.remove_pending_sync(ctx, &req.member_id);
                let assignment = self
                    .members
                    .get(&req.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                ctx.respond(
                    id,
                    Response::Sync(SyncResponse {
                        error: ErrorCode::NONE,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment,
                    }),
                );
                self.schedule_session(ctx, now, &req.member_id);
            }
        }
    }

    fn accept_assignment(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        assignments: Vec<MemberAssignment>,
    ) {
        let bytes: usize = assignments.iter().map(|a| a.assignment.len()).sum();
        // The group's current assignments are replaced, so they do not count twice.
        let current: usize = self.members.values().map(|m| m.assignment.len()).sum();
        let over_budget = ctx
            .state_bytes
            .saturating_sub(current)
            .saturating_add(bytes)
            > ctx.config.max_state_bytes;
        if bytes > ctx.config.max_assignment_bytes || over_budget {
            log!(
                "group {}: leader sent {} assignment bytes, over the cap",
                self.id,
                bytes
            );
            self.reset_and_propagate_assignment_error(ctx, now, ErrorCode::UNKNOWN_SERVER_ERROR);
            self.maybe_prepare_rebalance(ctx, now);
            return;
        }
        let assignments: HashMap<String, Bytes> = assignments
            .into_iter()
            .filter(|a| self.members.contains_key(&a.member_id))
            .map(|a| (a.member_id, a.assignment))
            .collect();
        self.set_and_propagate_assignment(ctx, now, assignments);
        self.state = GroupState::Stable;
        self.persist(ctx);
        log!(
            "group {}: stable at generation {}",
            self.id,
            self.generation
        );
    }

    // ----- Heartbeat, LeaveGroup, OffsetCommit --------------------------------------------

    pub(crate) fn heartbeat(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> ErrorCode {
        if let Err(e) = self.validate_current_member(member_id, instance_id) {
            return e;
        }
        if generation_id != self.generation {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => ErrorCode::UNKNOWN_MEMBER_ID,
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.schedule_session(ctx, now, member_id);
                ErrorCode::NONE
            }
            GroupState::PreparingRebalance => {
                self.schedule_session(ctx, now, member_id);
                ErrorCode::REBALANCE_IN_PROGRESS
            }
        }
    }

    pub(crate) fn leave(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        leaving: Vec<LeavingMember>,
    ) -> Vec<MemberLeaveResult> {
        leaving
            .into_iter()
            .map(|l| {
                let error = self.leave_one(ctx, now, &l);
                MemberLeaveResult {
                    member_id: l.member_id,
                    group_instance_id: l.group_instance_id,
                    error,
                }
            })
            .collect()
    }

    fn leave_one(&mut self, ctx: &mut Ctx, now: Millis, l: &LeavingMember) -> ErrorCode {
        if l.member_id.is_empty() {
            // Administrative removal of a static member by instance id alone.
            let current = l
                .group_instance_id
                .as_ref()
                .and_then(|i| self.static_members.get(i))
                .cloned();
            return match current {
                Some(member_id) => {
                    self.remove_member_and_update_group(ctx, now, &member_id);
                    ErrorCode::NONE
                }
                None => ErrorCode::UNKNOWN_MEMBER_ID,
            };
        }
        if self.forget_pending(ctx, &l.member_id) {
            if self.state == GroupState::PreparingRebalance {
                self.maybe_complete_join(ctx, now);
            }
            return ErrorCode::NONE;
        }
        match self.validate_current_member(&l.member_id, l.group_instance_id.as_deref()) {
            Ok(()) => {
                log!("group {}: member {} leaves", self.id, l.member_id);
                self.remove_member_and_update_group(ctx, now, &l.member_id);
                ErrorCode::NONE
            }
            Err(e) => e,
        }
    }

    /// Kafka's `validateOffsetCommit` plus the per-state checks of `doCommitOffsets`.
    pub(crate) fn validate_commit(
        &mut self,
        ctx: &mut Ctx,
        now: Millis,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_current_member(member_id, instance_id)?;
            if generation_id != self.generation {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
        } else if self.state != GroupState::Empty {
            // Only members commit to a group that has members.
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        match self.state {
            GroupState::Empty => Ok(()),
            GroupState::Stable | GroupState::PreparingRebalance => {
                // A commit is a sign of life; during PreparingRebalance the member learns of
                // the rebalance from its next heartbeat.
                self.schedule_session(ctx, now, member_id);
                Ok(())
            }
            GroupState::CompletingRebalance => Err(ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::Dead => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    }

    // ----- queries ------------------------------------------------------------------------

    pub(crate) fn describe(&self) -> GroupDescription {
        let stable = self.state == GroupState::Stable;
        let protocol = if stable {
            self.protocol_name.clone().unwrap_or_default()
        } else {
            String::new()
        };
        GroupDescription {
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            members: self
                .members
                .values()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
            protocol,
        }
    }
}

// ----- durable state ----------------------------------------------------------------------

impl Group {
    /// Queues the group's durable state for the driver to write.
    fn persist(&self, ctx: &mut Ctx) {
        ctx.persist.insert(self.id.clone(), Some(self.snapshot()));
    }

    /// The group's durable state (see [`crate::snapshot`]): meaningful when Stable or
    /// Empty, the states in which it is taken.
    pub(crate) fn snapshot(&self) -> GroupSnapshot {
        GroupSnapshot {
            group_id: self.id.clone(),
            state: self.state,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout: m.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// A group back from its durable state, Stable or Empty, in the same generation; every
    /// member's session starts now. Checked against every cap a live group is held to;
    /// on success the members are counted in `ctx.state_bytes` and their timers armed.
    pub(crate) fn restore(
        ctx: &mut Ctx,
        now: Millis,
        snap: GroupSnapshot,
    ) -> Result<Group, StateError> {
        let config = &ctx.config;
        if snap.group_id.is_empty() || snap.group_id.len() > config.max_id_bytes {
            return Err(StateError::Invalid("group id"));
        }
        if snap.members.len() > config.max_members_per_group {
            return Err(StateError::OverCapacity("members per group"));
        }
        let stable = match snap.state {
            GroupState::Stable if !snap.members.is_empty() => true,
            GroupState::Empty if snap.members.is_empty() => false,
            _ => return Err(StateError::Invalid("state and members disagree")),
        };
        if snap.generation < 1 {
            return Err(StateError::Invalid("generation"));
        }
        let (protocol_name, leader) = if stable {
            let Some(name) = snap.protocol_name else {
                return Err(StateError::Invalid("Stable without a protocol"));
            };
            if snap.protocol_type.as_deref().is_none_or(str::is_empty) {
                return Err(StateError::Invalid("Stable without a protocol type"));
            }
            let Some(leader) = snap
                .leader
                .filter(|l| snap.members.iter().any(|m| &m.member_id == l))
            else {
                return Err(StateError::Invalid("the leader is not a member"));
            };
            (Some(name), Some(leader))
        } else {
            (None, None)
        };
        let assignment_bytes: usize = snap.members.iter().map(|m| m.assignment.len()).sum();
        if assignment_bytes > config.max_assignment_bytes {
            return Err(StateError::OverCapacity("assignment bytes"));
        }
        let mut group = Group::new(snap.group_id, now);
        group.state = snap.state;
        group.generation = snap.generation;
        group.protocol_type = snap.protocol_type;
        group.protocol_name = protocol_name;
        group.leader = leader;
        let mut bytes = 0usize;
        for m in snap.members {
            // Member ids are a client-chosen prefix of at most MAX_ID_PREFIX_BYTES and a
            // 37-byte suffix.
            if m.member_id.is_empty() || m.member_id.len() > MAX_ID_PREFIX_BYTES + 37 {
                return Err(StateError::Invalid("member id"));
            }
            if m.group_instance_id
                .as_ref()
                .is_some_and(|i| i.is_empty() || i.len() > config.max_id_bytes)
            {
                return Err(StateError::Invalid("group instance id"));
            }
            let protocols = crate::coordinator::dedup_protocols(&m.protocols);
            if protocols.len() > config.max_protocols_per_member
                || protocol_bytes(&protocols) > config.max_metadata_bytes
            {
                return Err(StateError::OverCapacity("protocol metadata"));
            }
            let member = Member {
                id: m.member_id,
                instance_id: m.group_instance_id,
                client_id: truncated(&m.client_id, MAX_ID_PREFIX_BYTES).to_owned(),
                client_host: truncated(&m.client_host, MAX_ID_PREFIX_BYTES).to_owned(),
                session_timeout: m
                    .session_timeout
                    .clamp(config.min_session_timeout, config.max_session_timeout),
                rebalance_timeout: m.rebalance_timeout.min(config.max_rebalance_timeout),
                protocols,
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                generation: group.generation,
                session_deadline: None,
            };
            if let Some(p) = &group.protocol_name
                && !member.supports(p)
            {
                return Err(StateError::Invalid("a member lacks the selected protocol"));
            }
            if let Some(instance) = &member.instance_id
                && group
                    .static_members
                    .insert(instance.clone(), member.id.clone())
                    .is_some()
            {
                return Err(StateError::Invalid("a repeated group instance id"));
            }
            bytes += member.bytes();
            if group.members.insert(member.id.clone(), member).is_some() {
                return Err(StateError::Invalid("a repeated member id"));
            }
        }
        if ctx.state_bytes.saturating_add(bytes) > config.max_state_bytes {
            return Err(StateError::OverCapacity("state bytes"));
        }
        ctx.state_bytes += bytes;
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in &ids {
            group.schedule_session(ctx, now, id);
        }
        Ok(group)
    }

    /// This coordinator no longer serves the group: whatever its members wait for is
    /// answered with `error`, and every deadline disarmed. The group is about to be
    /// forgotten without a trace in the durable state.
    pub(crate) fn unload(&mut self, ctx: &mut Ctx, error: ErrorCode) {
        for m in self.members.values_mut() {
            if let Some(id) = m.awaiting_join.take() {
                ctx.join_error(id, m.id.clone(), error);
            }
            if let Some(id) = m.awaiting_sync.take() {
                ctx.sync_error(id, error);
            }
        }
        self.disarm_all(ctx);
        ctx.persist.remove(&self.id);
    }
}
