//! The [`Coordinator`]: every group this broker coordinates, the inputs that reach them and
//! the outputs they produce. See the crate docs for the call order.

use std::collections::{BTreeMap, HashSet, VecDeque};

use kafka_protocol::ErrorCode;

use crate::group::{Ctx, Group};
use crate::member_id::{MAX_ID_PREFIX_BYTES, MemberIds, truncated};
use crate::snapshot::{GroupSnapshot, StateError};
use crate::timers::Timers;
use crate::types::{
    CoordinatorStats, GroupConfig, GroupDescription, GroupListing, GroupState, GroupStats,
    Heartbeat, JoinGroup, LeaveGroup, LeaveResponse, MemberLeaveResult, Millis, Protocol,
    RequestId, Response, SyncGroup,
};

/// Kafka's classic group coordinator as a sans-IO state machine.
#[derive(Debug)]
pub struct Coordinator {
    /// Ordered by group id, so listings and timer ties are deterministic.
    groups: BTreeMap<String, Group>,
    ctx: Ctx,
}

impl Coordinator {
    /// A coordinator with no groups.
    #[must_use]
    pub fn new(config: GroupConfig) -> Self {
        let ids = MemberIds::new(config.member_id_seed);
        Self {
            groups: BTreeMap::new(),
            ctx: Ctx {
                config,
                timers: Timers::default(),
                out: VecDeque::new(),
                ids,
                rebalances: 0,
                state_bytes: 0,
                pending_total: 0,
                persist: BTreeMap::new(),
            },
        }
    }

    /// The configuration this coordinator runs with.
    #[must_use]
    pub fn config(&self) -> &GroupConfig {
        &self.ctx.config
    }

    // ----- inputs -------------------------------------------------------------------------

    /// A JoinGroup request. Answered at once (errors, KIP-394's `MEMBER_ID_REQUIRED`, a
    /// follower rejoining a Stable group unchanged, a static member replaced without a
    /// rebalance) or when the rebalance it starts or joins completes.
    pub fn join(&mut self, now: Millis, id: RequestId, mut req: JoinGroup) {
        let config = &self.ctx.config;
        req.rebalance_timeout = req.rebalance_timeout.min(config.max_rebalance_timeout);
        if req.client_id.len() > MAX_ID_PREFIX_BYTES {
            req.client_id = truncated(&req.client_id, MAX_ID_PREFIX_BYTES).to_owned();
        }
        if req.group_id.is_empty() || req.group_id.len() > config.max_id_bytes {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::INVALID_GROUP_ID);
        }
        if req
            .group_instance_id
            .as_ref()
            .is_some_and(|i| i.len() > config.max_id_bytes)
        {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::INVALID_REQUEST);
        }
        if req.session_timeout < config.min_session_timeout
            || req.session_timeout > config.max_session_timeout
        {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::INVALID_SESSION_TIMEOUT);
        }
        // Checked on the request as sent, before anything is built from it.
        let metadata_bytes: usize = req
            .protocols
            .iter()
            .map(|p| p.name.len() + p.metadata.len())
            .sum();
        if req.protocols.len() > config.max_protocols_per_member
            || metadata_bytes > config.max_metadata_bytes
        {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::UNKNOWN_SERVER_ERROR);
        }
        // Over all groups: retriable, the client backs off while others leave.
        let member_bytes = metadata_bytes + crate::group::MEMBER_OVERHEAD;
        if self.ctx.state_bytes.saturating_add(member_bytes) > config.max_state_bytes {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        let protocols = dedup_protocols(&req.protocols);

        let group_id = req.group_id.clone();
        if !self.groups.contains_key(&group_id) {
            // Only a member without an id may create a group; one with an id belongs to a
            // group this coordinator no longer knows (deleted, or before a restart).
            if !req.member_id.is_empty() {
                return self
                    .ctx
                    .join_error(id, req.member_id, ErrorCode::UNKNOWN_MEMBER_ID);
            }
            if !self.make_room() {
                return self.ctx.join_error(
                    id,
                    req.member_id,
                    ErrorCode::COORDINATOR_NOT_AVAILABLE,
                );
            }
            self.groups
                .insert(group_id.clone(), Group::new(group_id.clone(), now));
        }
        if let Some(group) = self.groups.get_mut(&group_id) {
            group.join(&mut self.ctx, now, id, req, protocols);
        }
        self.drop_if_unused(&group_id);
    }

    /// A SyncGroup request. The leader's carries the assignment; a follower's waits for it
    /// while the group is CompletingRebalance.
    pub fn sync(&mut self, now: Millis, id: RequestId, req: SyncGroup) {
        if req.group_id.is_empty() {
            return self.ctx.sync_error(id, ErrorCode::INVALID_GROUP_ID);
        }
        match self.groups.get_mut(&req.group_id) {
            Some(group) => group.sync(&mut self.ctx, now, id, req),
            None => self.ctx.sync_error(id, ErrorCode::UNKNOWN_MEMBER_ID),
        }
    }

    /// A Heartbeat request; always answered at once.
    pub fn heartbeat(&mut self, now: Millis, id: RequestId, req: Heartbeat) {
        let error = if req.group_id.is_empty() {
            ErrorCode::INVALID_GROUP_ID
        } else {
            match self.groups.get_mut(&req.group_id) {
                Some(group) => group.heartbeat(
                    &mut self.ctx,
                    now,
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                    req.generation_id,
                ),
                None => ErrorCode::UNKNOWN_MEMBER_ID,
            }
        };
        self.ctx.heartbeat(id, error);
    }

    /// A LeaveGroup request (one member for v0-2, a batch for v3+); answered at once.
    pub fn leave(&mut self, now: Millis, id: RequestId, req: LeaveGroup) {
        if req.group_id.is_empty() {
            return self.ctx.leave(
                id,
                LeaveResponse {
                    error: ErrorCode::INVALID_GROUP_ID,
                    members: Vec::new(),
                },
            );
        }
        let members = match self.groups.get_mut(&req.group_id) {
            Some(group) => group.leave(&mut self.ctx, now, req.members),
            None => req
                .members
                .into_iter()
                .map(|l| MemberLeaveResult {
                    member_id: l.member_id,
                    group_instance_id: l.group_instance_id,
                    error: ErrorCode::UNKNOWN_MEMBER_ID,
                })
                .collect(),
        };
        self.ctx.leave(
            id,
            LeaveResponse {
                error: ErrorCode::NONE,
                members,
            },
        );
        self.drop_if_unused(&req.group_id);
    }

    /// Fires every deadline at or before `now`: session expiries, rebalance and initial-delay
    /// deadlines, missing SyncGroups, unused KIP-394 ids. Deadlines that firing sets at `now`
    /// itself wait for the next call, so this always returns.
    pub fn handle_timeout(&mut self, now: Millis) {
        for entry in self.ctx.timers.due(now) {
            if !self.ctx.timers.remove(&entry) {
                continue; // disarmed by an earlier firing in this batch
            }
            let (_, key) = entry;
            if let Some(group) = self.groups.get_mut(&key.group) {
                group.on_timer(&mut self.ctx, now, key.kind);
            }
            self.drop_if_unused(&key.group);
        }
    }

    // ----- outputs ------------------------------------------------------------------------

    /// The next answer to hand to a connection, in the order produced. Call after every
    /// input until `None`.
    pub fn poll_response(&mut self) -> Option<(RequestId, Response)> {
        self.ctx.out.pop_front()
    }

    /// The earliest deadline: sleep until then and call [`Coordinator::handle_timeout`].
    /// `None` when nothing is scheduled. Changes after any input.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.ctx.timers.first()
    }

    // ----- queries and commands -----------------------------------------------------------

    /// DescribeGroups for one group; `None` for a group this coordinator does not hold,
    /// which Kafka describes as state `Dead` with no members.
    #[must_use]
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        self.groups.get(group_id).map(Group::describe)
    }

    /// ListGroups: every group whose state is in `states`, or every group if `states` is
    /// empty (v4+ `StatesFilter`), ordered by group id.
    #[must_use]
    pub fn list(&self, states: &[GroupState]) -> Vec<GroupListing> {
        self.groups
            .values()
            .filter(|g| states.is_empty() || states.contains(&g.state))
            .map(|g| GroupListing {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state,
            })
            .collect()
    }

    /// Every group's state, member count and generation (ordered by group id), and the
    /// rebalances completed since the coordinator started: what an operator's metrics
    /// show.
    #[must_use]
    pub fn stats(&self) -> CoordinatorStats {
        CoordinatorStats {
            groups: self
                .groups
                .values()
                .map(|g| GroupStats {
                    group_id: g.id.clone(),
                    state: g.state,
                    members: g.members.len(),
                    generation: g.generation,
                })
                .collect(),
            rebalances: self.ctx.rebalances,
        }
    }

    /// The group's state, `None` if unknown.
    #[must_use]
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// The group's current generation, `None` if unknown.
    #[must_use]
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation)
    }

    /// DeleteGroups for one group: only an Empty group can go (`NON_EMPTY_GROUP`
    /// otherwise); an unknown one is `GROUP_ID_NOT_FOUND`. The broker deletes the group's
    /// offsets itself, and may have offsets for groups this coordinator never saw
    /// (`assign()`-style consumers), so it should consult its offset store on
    /// `GROUP_ID_NOT_FOUND`.
    pub fn delete(&mut self, group_id: &str) -> Result<(), ErrorCode> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(ErrorCode::GROUP_ID_NOT_FOUND);
        };
        match group.state {
            GroupState::Empty | GroupState::Dead => {
                group.disarm_all(&mut self.ctx);
                self.groups.remove(group_id);
                self.ctx.persist.insert(group_id.to_owned(), None);
                Ok(())
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => Err(ErrorCode::NON_EMPTY_GROUP),
        }
    }

    /// Whether an OffsetCommit may proceed, by Kafka's rules:
    ///
    /// - the group id must be 1 to `max_id_bytes` bytes (`INVALID_GROUP_ID`);
    /// - generation -1 with no member id and no instance id is a "simple" commit from a
    ///   consumer that uses `assign()`; allowed only while the group is Empty or unknown
    ///   (`UNKNOWN_MEMBER_ID` once it has members);
    /// - otherwise the member must be current (`FENCED_INSTANCE_ID`, `UNKNOWN_MEMBER_ID`)
    ///   and of the current generation (`ILLEGAL_GENERATION`; also for any generation >= 0
    ///   on an unknown group);
    /// - while CompletingRebalance, `REBALANCE_IN_PROGRESS`; during PreparingRebalance the
    ///   commit is allowed (the member learns of the rebalance from its next heartbeat).
    ///
    /// An allowed commit from a member counts as a heartbeat, hence `&mut self` and `now`.
    pub fn validate_commit(
        &mut self,
        now: Millis,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        // A group id too long to hold a group would also be kept by the offset store.
        if group_id.is_empty() || group_id.len() > self.ctx.config.max_id_bytes {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        match self.groups.get_mut(group_id) {
            Some(group) => group.validate_commit(
                &mut self.ctx,
                now,
                generation_id,
                member_id,
                group_instance_id,
            ),
            None if generation_id >= 0 => Err(ErrorCode::ILLEGAL_GENERATION),
            None if !member_id.is_empty() || group_instance_id.is_some() => {
                Err(ErrorCode::UNKNOWN_MEMBER_ID)
            }
            None => Ok(()),
        }
    }

    // ----- durable state ------------------------------------------------------------------

    /// The next durable state to write: `(group, Some(state))` to store, `(group, None)` to
    /// delete. Produced when a generation becomes Stable, a group becomes Empty, a static
    /// member is replaced without a rebalance, or a group is deleted or evicted; a newer
    /// state of a group replaces one not polled yet. Call after every input until `None`,
    /// and write in the order polled (see [`crate::snapshot`]).
    pub fn poll_persist(&mut self) -> Option<(String, Option<GroupSnapshot>)> {
        self.ctx.persist.pop_first()
    }

    /// The durable state of `group_id` as it is now; `None` for an unknown group or one
    /// that is rebalancing (only settled states are persisted).
    #[must_use]
    pub fn snapshot(&self, group_id: &str) -> Option<GroupSnapshot> {
        self.groups
            .get(group_id)
            .filter(|g| matches!(g.state, GroupState::Stable | GroupState::Empty))
            .map(Group::snapshot)
    }

    /// Takes over a group from its durable state (written by this or another coordinator):
    /// Stable or Empty in the same generation, every member's session starting at `now`,
    /// so members that keep heartbeating see no rebalance. The next rebalance continues
    /// from this generation. Produces no persist event.
    ///
    /// # Errors
    ///
    /// [`StateError::AlreadyHeld`] if the group is here already;
    /// [`StateError::Invalid`] for a state no coordinator could have written;
    /// [`StateError::OverCapacity`] if the group would break a cap (`max_groups` held
    /// already, `max_members_per_group`, `max_state_bytes`, ...). Nothing changes on
    /// error, and nothing is evicted to make room.
    pub fn restore(&mut self, now: Millis, snapshot: GroupSnapshot) -> Result<(), StateError> {
        if self.groups.contains_key(&snapshot.group_id) {
            return Err(StateError::AlreadyHeld);
        }
        // No eviction here: restoring one stored group must not forget (and delete) another.
        if self.groups.len() >= self.ctx.config.max_groups {
            return Err(StateError::OverCapacity("groups"));
        }
        let group = Group::restore(&mut self.ctx, now, snapshot)?;
        self.groups.insert(group.id.clone(), group);
        Ok(())
    }

    /// Stops serving every group whose id matches: parked JoinGroup and SyncGroup
    /// requests are answered with `error` (the broker passes `NOT_COORDINATOR` when the
    /// groups moved elsewhere), and the groups are forgotten without persist events (their
    /// durable state stays as last written, for the next owner). Returns how many.
    pub fn unload(&mut self, mut matches: impl FnMut(&str) -> bool, error: ErrorCode) -> usize {
        let ids: Vec<String> = self
            .groups
            .keys()
            .filter(|g| matches(g.as_str()))
            .cloned()
            .collect();
        for id in &ids {
            if let Some(mut g) = self.groups.remove(id) {
                g.unload(&mut self.ctx, error);
            }
        }
        // States of groups already forgotten (deleted, evicted) are the owner's to write.
        self.ctx.persist.retain(|g, _| !matches(g));
        ids.len()
    }

    // ----- internals ----------------------------------------------------------------------

    /// At `max_groups`, forgets the group that has been Empty (with no KIP-394 ids out)
    /// the longest. `false` if every group is in use.
    fn make_room(&mut self) -> bool {
        if self.groups.len() < self.ctx.config.max_groups {
            return true;
        }
        let victim = self
            .groups
            .values()
            .filter(|g| g.state == GroupState::Empty && g.pending.is_empty())
            .min_by_key(|g| g.empty_since)
            .map(|g| g.id.clone());
        match victim {
            Some(id) => {
                if let Some(mut g) = self.groups.remove(&id) {
                    g.disarm_all(&mut self.ctx);
                    // Forgotten here, so forgotten by the next owner too (its offsets stay).
                    self.ctx.persist.insert(id, None);
                }
                true
            }
            None => false,
        }
    }

    fn drop_if_unused(&mut self, group_id: &str) {
        if self.groups.get(group_id).is_some_and(Group::is_unused) {
            self.groups.remove(group_id);
        }
    }

    /// Internal consistency, for tests: returns the first violated invariant.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        use crate::timers::TimerKind;
        let config = &self.ctx.config;
        if self.groups.len() > config.max_groups {
            return Err("too many groups".into());
        }
        let mut armed = std::collections::BTreeSet::new();
        for g in self.groups.values() {
            let gid = &g.id;
            let fail = |what: &str| Err(format!("group {gid}: {what}"));
            if g.members.len() > 2 * config.max_members_per_group.max(1) {
                return fail("too many members");
            }
            if g.pending.len() > config.max_pending_members_per_group {
                return fail("too many pending members");
            }
            match &g.leader {
                Some(l) if !g.members.contains_key(l) => return fail("leader is not a member"),
                None if !g.members.is_empty() => return fail("members but no leader"),
                _ => {}
            }
            let settled = matches!(
                g.state,
                GroupState::CompletingRebalance | GroupState::Stable
            );
            if g.state == GroupState::Empty && !g.members.is_empty() {
                return fail("Empty with members");
            }
            if settled {
                if g.members.is_empty() {
                    return fail("settled without members");
                }
                let Some(p) = &g.protocol_name else {
                    return fail("settled without protocol");
                };
                for m in g.members.values() {
                    if m.generation != g.generation {
                        return fail("member of another generation");
                    }
                    if m.awaiting_join.is_some() {
                        return fail("awaiting join while settled");
                    }
                    if !g.pending_sync.is_empty() && g.sync_deadline.is_none() {
                        return fail("pending syncs without deadline");
                    }
                    let _ = p;
                }
            } else if g.sync_deadline.is_some() || !g.pending_sync.is_empty() {
                return fail("sync deadline outside a settled state");
            }
            if g.state != GroupState::CompletingRebalance
                && g.members.values().any(|m| m.awaiting_sync.is_some())
            {
                return fail("awaiting sync outside CompletingRebalance");
            }
            if (g.state == GroupState::PreparingRebalance) != g.join_deadline.is_some() {
                return fail("join deadline iff PreparingRebalance");
            }
            if g.pending_sync.iter().any(|m| !g.members.contains_key(m)) {
                return fail("pending sync of a non-member");
            }
            let statics: HashSet<(&String, &String)> = g
                .members
                .values()
                .filter_map(|m| m.instance_id.as_ref().map(|i| (i, &m.id)))
                .collect();
            if statics.len() != g.static_members.len()
                || g.static_members.iter().any(|kv| !statics.contains(&kv))
            {
                return fail("static member map out of step");
            }
            let mut push = |at: Option<Millis>, kind: TimerKind| {
                if let Some(at) = at {
                    armed.insert((at, gid.clone(), kind));
                }
            };
            push(g.join_deadline, TimerKind::Join);
            push(g.sync_deadline, TimerKind::Sync);
            for (id, at) in &g.pending {
                if at.is_none() {
                    return fail("pending member without expiry");
                }
                push(*at, TimerKind::Pending(id.clone()));
            }
            for (id, m) in &g.members {
                push(m.session_deadline, TimerKind::Session(id.clone()));
            }
        }
        let bytes: usize = self
            .groups
            .values()
            .flat_map(|g| g.members.values())
            .map(crate::group::Member::bytes)
            .sum();
        if bytes != self.ctx.state_bytes {
            return Err(format!(
                "state bytes out of step: {} counted, {bytes} held",
                self.ctx.state_bytes
            ));
        }
        let pending: usize = self.groups.values().map(|g| g.pending.len()).sum();
        if pending != self.ctx.pending_total {
            return Err(format!(
                "pending total out of step: {} counted, {pending} held",
                self.ctx.pending_total
            ));
        }
        let set: std::collections::BTreeSet<_> = self
            .ctx
            .timers
            .entries()
            .map(|(at, k)| (*at, k.group.clone(), k.kind.clone()))
            .collect();
        if set != armed {
            return Err(format!("timer set out of step: {set:?} vs {armed:?}"));
        }
        Ok(())
    }
}

/// Keeps the first occurrence of each protocol name, as Kafka's keyed collection does.
pub(crate) fn dedup_protocols(protocols: &[Protocol]) -> Vec<Protocol> {
    let mut seen = HashSet::new();
    protocols
        .iter()
        .filter(|p| seen.insert(p.name.as_str()))
        .cloned()
        .collect()
}
