//! The coordinator's vocabulary: virtual time, request ids, group states, configuration,
//! and the request and response values the broker maps to and from the wire. Errors are
//! [`ErrorCode`]s, the protocol's own type; the crate docs list the codes the coordinator
//! produces.
//!
//! None of these types know about wire versions. The broker fills in what an older request
//! version lacks (JoinGroup v0 has no rebalance timeout: pass the session timeout; LeaveGroup
//! v0-2 names one member: pass a one-element list) and drops what an older response version
//! cannot carry.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ErrorCode;

/// A point in time, in milliseconds since an origin the driver chooses (process start, say).
///
/// The coordinator has no clock: every input carries `now`, and deadlines come back as
/// `Millis`. The driver converts, e.g. `Millis::from_duration(start.elapsed())`, and tests
/// use plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub u64);

impl Millis {
    /// `d` after the origin, saturating at `u64::MAX` milliseconds.
    #[must_use]
    pub fn from_duration(d: Duration) -> Self {
        Self(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// The time since the origin.
    #[must_use]
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }

    /// `self + d`, saturating: a deadline too far away to represent is "never" in practice.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(Self::from_duration(d).0))
    }
}

impl Add<Duration> for Millis {
    type Output = Millis;

    fn add(self, d: Duration) -> Millis {
        self.saturating_add(d)
    }
}

/// Chosen by the caller for each input that expects an answer, and handed back with the
/// answer, so a response produced later (when a rebalance completes) finds its connection.
///
/// The coordinator does not check uniqueness; reusing an id that still awaits an answer only
/// makes the driver's routing ambiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// The classic protocol's group states, named as Kafka names them on the wire
/// (DescribeGroups, ListGroups v4+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupState {
    /// No members. Offsets may still be committed (by `assign()`-style consumers).
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joins answered; waiting for the leader's assignment in SyncGroup.
    CompletingRebalance,
    /// Assignment distributed; members heartbeat.
    Stable,
    /// Deleted. A deleted group is forgotten at once, so queries answer `None` for it; the
    /// state exists for filters and for the broker's answer about unknown groups.
    Dead,
}

impl GroupState {
    /// Every state, in declaration order.
    pub const ALL: [GroupState; 5] = [
        Self::Empty,
        Self::PreparingRebalance,
        Self::CompletingRebalance,
        Self::Stable,
        Self::Dead,
    ];

    /// Kafka's name for the state.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        }
    }

    /// Parses a state name case-insensitively, as Kafka does for ListGroups' `StatesFilter`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Coordinator settings. Every bound on untrusted input is here, with Kafka's default where
/// Kafka has the setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`: shorter JoinGroup session timeouts get
    /// `INVALID_SESSION_TIMEOUT`. Default 6 s.
    pub min_session_timeout: Duration,
    /// `group.max.session.timeout.ms`: longer ones too. Default 30 min.
    pub max_session_timeout: Duration,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members, extended by this much (up to the rebalance timeout) while
    /// members keep arriving. Zero disables the delay. Default 3 s.
    pub initial_rebalance_delay: Duration,
    /// How long a brand-new member may wait in JoinGroup before it is dropped (Kafka's
    /// `NewMemberJoinTimeoutMs`): a client that gave up and retried would otherwise leave a
    /// defunct member holding up every rebalance. Default 5 min.
    pub new_member_join_timeout: Duration,
    /// Groups held at once. At the cap the Empty group (with no outstanding KIP-394 ids)
    /// that has been empty longest is forgotten to make room; if there is none, a JoinGroup
    /// that would create a group gets `COORDINATOR_NOT_AVAILABLE`.
    /// Default 10 000.
    pub max_groups: usize,
    /// `group.max.size`: members per group (`GROUP_MAX_SIZE_REACHED`). Default 1000.
    pub max_members_per_group: usize,
    /// KIP-394 member ids handed out but not yet used, per group. Each lives one session
    /// timeout; beyond the cap, JoinGroup gets `GROUP_MAX_SIZE_REACHED`. Default 1000.
    pub max_pending_members_per_group: usize,
    /// Protocols one member may offer in JoinGroup. Default 64.
    pub max_protocols_per_member: usize,
    /// Bytes of protocol names plus metadata one member may send in JoinGroup. Above it the
    /// join gets `UNKNOWN_SERVER_ERROR`, Kafka's answer for group state too large to store.
    /// Default 1 MiB.
    pub max_metadata_bytes: usize,
    /// Bytes of assignment the leader may send in one SyncGroup. Above it every waiting
    /// member gets `UNKNOWN_SERVER_ERROR` and the group rebalances, as Kafka does when the
    /// group record cannot be written. Default 16 MiB.
    pub max_assignment_bytes: usize,
    /// Seeds member id generation. Ids are unique within one coordinator whatever the seed;
    /// a process must pick a fresh seed (e.g. from the OS's random source) at start so that
    /// ids handed out before a restart are not handed out again. Default 0 (for tests).
    pub member_id_seed: u64,
    /// Longest rebalance timeout a member gets; a JoinGroup asking for more is held to
    /// this (Kafka bounds it only by the field's type, about 24.8 days, so one member that
    /// never rejoins could hold a rebalance that long). Default 5 min, the consumer's
    /// default `max.poll.interval.ms`.
    pub max_rebalance_timeout: Duration,
    /// Longest group id and `group.instance.id`, in bytes. Both are kept (in the group, its
    /// timers and the offset store) for as long as the group lives, so a JoinGroup with a
    /// longer group id gets `INVALID_GROUP_ID` and one with a longer instance id
    /// `INVALID_REQUEST`. Kafka bounds neither beyond the wire's 32 767 bytes (its clients
    /// refuse instance ids over 249 characters). Default 255.
    pub max_id_bytes: usize,
    /// Bytes held for members over all groups: ids, protocol metadata, assignments and a
    /// fixed 256 bytes per member (each group's share is capped by `max_members_per_group`,
    /// `max_metadata_bytes` per member and `max_assignment_bytes`, but groups times those
    /// is far too much). A JoinGroup that would go over gets `COORDINATOR_NOT_AVAILABLE`
    /// (retriable); a leader's SyncGroup that would, `UNKNOWN_SERVER_ERROR` as for an
    /// oversized assignment. Default 256 MiB (about a million small members).
    pub max_state_bytes: usize,
    /// KIP-394 member ids handed out but not yet used, over all groups; beyond it a
    /// JoinGroup without a member id gets `COORDINATOR_NOT_AVAILABLE` (retriable). Default
    /// 100 000.
    pub max_pending_members: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(30 * 60),
            initial_rebalance_delay: Duration::from_secs(3),
            new_member_join_timeout: Duration::from_secs(5 * 60),
            max_groups: 10_000,
            max_members_per_group: 1000,
            max_pending_members_per_group: 1000,
            max_protocols_per_member: 64,
            max_metadata_bytes: 1 << 20,
            max_assignment_bytes: 16 << 20,
            member_id_seed: 0,
            max_rebalance_timeout: Duration::from_secs(5 * 60),
            max_id_bytes: 255,
            max_state_bytes: 256 << 20,
            max_pending_members: 100_000,
        }
    }
}

/// One protocol a member supports (for consumers: an assignor and the subscription).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// Protocol name, e.g. `range`, `cooperative-sticky`.
    pub name: String,
    /// Opaque to the coordinator; handed to the leader.
    pub metadata: Bytes,
}

impl Protocol {
    /// A protocol from its name and metadata.
    pub fn new(name: impl Into<String>, metadata: impl Into<Bytes>) -> Self {
        Self {
            name: name.into(),
            metadata: metadata.into(),
        }
    }
}

/// A JoinGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroup {
    /// The group; empty is `INVALID_GROUP_ID`.
    pub group_id: String,
    /// Empty for a member that has no id yet.
    pub member_id: String,
    /// `group.instance.id` (v5+): makes the member static (KIP-345).
    pub group_instance_id: Option<String>,
    /// Without a heartbeat for this long, the member is removed.
    pub session_timeout: Duration,
    /// How long a rebalance waits for members to rejoin (v1+; for v0 pass the session
    /// timeout, as Kafka does).
    pub rebalance_timeout: Duration,
    /// E.g. `consumer`; all members must agree.
    pub protocol_type: String,
    /// Supported protocols in preference order. A repeated name keeps its first occurrence.
    pub protocols: Vec<Protocol>,
    /// From the request header; prefixes generated member ids and shows in DescribeGroups.
    /// Only its first [`MAX_ID_PREFIX_BYTES`](crate::MAX_ID_PREFIX_BYTES) bytes are kept.
    pub client_id: String,
    /// The client's address, for DescribeGroups.
    pub client_host: String,
    /// Why the member (re)joins (v8+), for logs only.
    pub reason: Option<String>,
    /// Version 4 and later: a member without an id first gets `MEMBER_ID_REQUIRED` and an
    /// id to rejoin with (KIP-394). Static members are exempt, as in Kafka.
    pub require_known_member_id: bool,
}

/// One member's assignment in the leader's SyncGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAssignment {
    /// The member.
    pub member_id: String,
    /// Opaque to the coordinator.
    pub assignment: Bytes,
}

/// A SyncGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncGroup {
    /// The group.
    pub group_id: String,
    /// The generation from the JoinGroup response.
    pub generation_id: i32,
    /// The member.
    pub member_id: String,
    /// The member's `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// v5+: checked against the group's when present.
    pub protocol_type: Option<String>,
    /// v5+: checked against the group's when present.
    pub protocol_name: Option<String>,
    /// Non-empty only from the leader. Members missing here get an empty assignment; ids
    /// that are not members are ignored.
    pub assignments: Vec<MemberAssignment>,
}

/// A Heartbeat request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The group.
    pub group_id: String,
    /// The member's generation.
    pub generation_id: i32,
    /// The member.
    pub member_id: String,
    /// The member's `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
}

/// One member named in a LeaveGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeavingMember {
    /// May be empty together with a `group_instance_id`: an administrator removing a static
    /// member by instance id.
    pub member_id: String,
    /// The member's `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
}

/// A LeaveGroup request: v3+ names a batch of members, v0-2 exactly one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaveGroup {
    /// The group.
    pub group_id: String,
    /// The members leaving.
    pub members: Vec<LeavingMember>,
}

/// A member as the leader sees it in its JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinedMember {
    /// The member.
    pub member_id: String,
    /// Its `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// Its metadata for the selected protocol.
    pub metadata: Bytes,
}

/// The answer to a [`JoinGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinResponse {
    /// The outcome.
    pub error: ErrorCode,
    /// The new generation; -1 on error.
    pub generation_id: i32,
    /// The group's protocol type (v7+); `None` on error.
    pub protocol_type: Option<String>,
    /// The selected protocol; `None` on error.
    pub protocol_name: Option<String>,
    /// The leader's member id; empty on error.
    pub leader: String,
    /// Always `false`: this coordinator never asks a leader to skip assignment (KIP-814 is
    /// for server-side assignors).
    pub skip_assignment: bool,
    /// The member's id: the one to use from now on, or with `MEMBER_ID_REQUIRED` the one to
    /// rejoin with.
    pub member_id: String,
    /// Every member with its metadata, for the leader only; empty for followers.
    pub members: Vec<JoinedMember>,
}

impl JoinResponse {
    /// A failed JoinGroup answer: `error`, generation -1, no protocol, leader or members;
    /// `member_id` as the answer should carry it (empty, or the id to rejoin with).
    #[must_use]
    pub fn failed(member_id: String, error: ErrorCode) -> Self {
        Self {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id,
            members: Vec::new(),
        }
    }
}

/// The answer to a [`SyncGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResponse {
    /// The outcome.
    pub error: ErrorCode,
    /// The group's protocol type (v5+); `None` on error.
    pub protocol_type: Option<String>,
    /// The selected protocol (v5+); `None` on error.
    pub protocol_name: Option<String>,
    /// This member's assignment; empty on error.
    pub assignment: Bytes,
}

impl SyncResponse {
    /// A failed SyncGroup answer: `error`, no protocol, an empty assignment.
    #[must_use]
    pub fn failed(error: ErrorCode) -> Self {
        Self {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// The answer to a [`Heartbeat`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// The outcome.
    pub error: ErrorCode,
}

/// The outcome for one member of a [`LeaveGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberLeaveResult {
    /// As in the request.
    pub member_id: String,
    /// As in the request.
    pub group_instance_id: Option<String>,
    /// The outcome for this member.
    pub error: ErrorCode,
}

/// The answer to a [`LeaveGroup`]. For v0-2, which carry no member list, the broker answers
/// with the single member's error when `error` is `NONE`, as Kafka does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaveResponse {
    /// Group-level outcome.
    pub error: ErrorCode,
    /// One entry per requested member, in request order.
    pub members: Vec<MemberLeaveResult>,
}

/// What [`crate::Coordinator::poll_response`] hands back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// For a [`JoinGroup`].
    Join(JoinResponse),
    /// For a [`SyncGroup`].
    Sync(SyncResponse),
    /// For a [`Heartbeat`].
    Heartbeat(HeartbeatResponse),
    /// For a [`LeaveGroup`].
    Leave(LeaveResponse),
}

impl Response {
    /// The top-level error of whichever response this is.
    #[must_use]
    pub fn error(&self) -> ErrorCode {
        match self {
            Self::Join(r) => r.error,
            Self::Sync(r) => r.error,
            Self::Heartbeat(r) => r.error,
            Self::Leave(r) => r.error,
        }
    }
}

/// One member in a [`GroupDescription`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member.
    pub member_id: String,
    /// Its `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// From its latest JoinGroup.
    pub client_id: String,
    /// From its latest JoinGroup.
    pub client_host: String,
    /// Its metadata for the selected protocol; empty unless the group is Stable (as Kafka).
    pub metadata: Bytes,
    /// Its assignment; empty unless the group is Stable (as Kafka).
    pub assignment: Bytes,
}

/// A DescribeGroups entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group's state.
    pub state: GroupState,
    /// Empty if no member ever joined.
    pub protocol_type: String,
    /// The selected protocol when Stable, empty otherwise (as Kafka).
    pub protocol: String,
    /// Members ordered by member id.
    pub members: Vec<MemberDescription>,
}

/// One group in [`CoordinatorStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStats {
    /// The group.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Members, static ones included.
    pub members: usize,
    /// Current generation (0 before the first rebalance completed).
    pub generation: i32,
}

/// A snapshot of the coordinator for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorStats {
    /// Every group, ordered by group id.
    pub groups: Vec<GroupStats>,
    /// Generations completed over all groups since the coordinator started.
    pub rebalances: u64,
}

/// A ListGroups entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    /// The group.
    pub group_id: String,
    /// Empty if no member ever joined.
    pub protocol_type: String,
    /// The group's state.
    pub state: GroupState,
}
