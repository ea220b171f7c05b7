//! The [`Coordinator`]: every group this broker coordinates, the inputs that reach them and
//! the outputs they produce. See the crate docs for the call order.

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::group::{Ctx, Group};
use crate::member_id::MemberIds;
use crate::timers::Timers;
use crate::types::{
    ErrorCode, GroupConfig, GroupDescription, GroupListing, GroupState, Heartbeat, JoinGroup,
    LeaveGroup, LeaveResponse, MemberLeaveResult, Millis, Protocol, RequestId, Response, SyncGroup,
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
    pub fn join(&mut self, now: Millis, id: RequestId, req: JoinGroup) {
        let config = &self.ctx.config;
        if req.group_id.is_empty() {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::InvalidGroupId);
        }
        if req.session_timeout < config.min_session_timeout
            || req.session_timeout > config.max_session_timeout
        {
            return self
                .ctx
                .join_error(id, req.member_id, ErrorCode::InvalidSessionTimeout);
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
                .join_error(id, req.member_id, ErrorCode::UnknownServerError);
        }
        let protocols = dedup_protocols(&req.protocols);

        let group_id = req.group_id.clone();
        if !self.groups.contains_key(&group_id) {
            // Only a member without an id may create a group; one with an id belongs to a
            // group this coordinator no longer knows (deleted, or before a restart).
            if !req.member_id.is_empty() {
                return self
                    .ctx
                    .join_error(id, req.member_id, ErrorCode::UnknownMemberId);
            }
            if !self.make_room() {
                return self
                    .ctx
                    .join_error(id, req.member_id, ErrorCode::CoordinatorNotAvailable);
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
            return self.ctx.sync_error(id, ErrorCode::InvalidGroupId);
        }
        match self.groups.get_mut(&req.group_id) {
            Some(group) => group.sync(&mut self.ctx, now, id, req),
            None => self.ctx.sync_error(id, ErrorCode::UnknownMemberId),
        }
    }

    /// A Heartbeat request; always answered at once.
    pub fn heartbeat(&mut self, now: Millis, id: RequestId, req: Heartbeat) {
        let error = if req.group_id.is_empty() {
            ErrorCode::InvalidGroupId
        } else {
            match self.groups.get_mut(&req.group_id) {
                Some(group) => group.heartbeat(
                    &mut self.ctx,
                    now,
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                    req.generation_id,
                ),
                None => ErrorCode::UnknownMemberId,
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
                    error: ErrorCode::InvalidGroupId,
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
                    error: ErrorCode::UnknownMemberId,
                })
                .collect(),
        };
        self.ctx.leave(
            id,
            LeaveResponse {
                error: ErrorCode::None,
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
            return Err(ErrorCode::GroupIdNotFound);
        };
        match group.state {
            GroupState::Empty | GroupState::Dead => {
                group.disarm_all(&mut self.ctx);
                self.groups.remove(group_id);
                Ok(())
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => Err(ErrorCode::NonEmptyGroup),
        }
    }

    /// Whether an OffsetCommit may proceed, by Kafka's rules:
    ///
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
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        match self.groups.get_mut(group_id) {
            Some(group) => group.validate_commit(
                &mut self.ctx,
                now,
                generation_id,
                member_id,
                group_instance_id,
            ),
            None if generation_id >= 0 => Err(ErrorCode::IllegalGeneration),
            None if !member_id.is_empty() || group_instance_id.is_some() => {
                Err(ErrorCode::UnknownMemberId)
            }
            None => Ok(()),
        }
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
}

/// Keeps the first occurrence of each protocol name, as Kafka's keyed collection does.
fn dedup_protocols(protocols: &[Protocol]) -> Vec<Protocol> {
    let mut seen = HashSet::new();
    protocols
        .iter()
        .filter(|p| seen.insert(p.name.as_str()))
        .cloned()
        .collect()
}
