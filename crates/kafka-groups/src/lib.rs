//! Kafka's classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! and the group checks of OffsetCommit) as a deterministic, sans-IO state machine, after
//! Kafka's `GroupCoordinator` and `GroupMetadata`.
//!
//! No sockets, no runtime, no clock: every input carries `now` as [`Millis`], answers come
//! out of [`Coordinator::poll_response`], and [`Coordinator::poll_timeout`] says when the
//! driver must next call [`Coordinator::handle_timeout`]. The broker maps wire messages to
//! the domain types in [`types`] and back; this crate does not know wire versions.
//!
//! # Call order
//!
//! ```text
//! loop {
//!     on a request:  coordinator.join / sync / heartbeat / leave (now, RequestId, request)
//!     on a deadline: coordinator.handle_timeout(now)
//!     then:          while let Some((id, response)) = coordinator.poll_response() { send }
//!                    sleep until coordinator.poll_timeout() or the next request
//! }
//! ```
//!
//! A JoinGroup or SyncGroup may be answered much later than it arrived (when a rebalance
//! completes or the leader's assignment arrives), from any later input or timeout; the
//! [`RequestId`] the caller chose routes it back. Every request gets exactly one answer: a
//! parked request whose member is removed, fenced or superseded by a newer request is
//! answered with an error. The synchronous calls ([`Coordinator::describe`],
//! [`Coordinator::list`], [`Coordinator::delete`], [`Coordinator::validate_commit`]) answer
//! directly.
//!
//! # Group states
//!
//! ```text
//!                  JoinGroup (first member)
//!     +---------+ ------------------------------------------> +--------------------+
//!     |  Empty  |                                             | PreparingRebalance | <--+
//!     +---------+ <------------------------------------------ +--------------------+    |
//!        |          rebalance completes and nobody is left          |                   |
//!        |                                                          | every member      |
//!        | DeleteGroups                                             | rejoined, or the  |
//!        v                                                          | rebalance timeout |
//!     +---------+                                                   v                   |
//!     |  Dead   |                                         +---------------------+       |
//!     +---------+                                         | CompletingRebalance | ------+
//!   (forgotten at once)                                   +---------------------+       |
//!                                                                   |                   |
//!                                                                   | leader's          |
//!                                                                   | SyncGroup         |
//!                                                                   v                   |
//!                                                         +---------------------+       |
//!                                                         |       Stable        | ------+
//!                                                         +---------------------+
//!
//!   back to PreparingRebalance: a member joins, leaves, changes its protocols or fails its
//!   session; the leader rejoins; a member does not send SyncGroup in time (Completing/Stable)
//! ```
//!
//! - **Empty**: no members. A JoinGroup without a member id creates the group; the first
//!   rebalance of an empty group waits `initial_rebalance_delay` and extends by that much
//!   (within the rebalance timeout) while new members keep arriving, so a fleet of consumers
//!   starting together produces one rebalance rather than one each.
//! - **PreparingRebalance**: JoinGroups are parked. It completes early once every member
//!   has rejoined (and no KIP-394 id is outstanding), otherwise at the rebalance timeout (the
//!   largest of the members'), when dynamic members that did not rejoin are removed. The
//!   generation increments; the leader (the first member, re-elected among those that
//!   rejoined if needed) gets every member's metadata for the protocol all members support,
//!   chosen by vote in preference order.
//! - **CompletingRebalance**: followers' SyncGroups are parked until the leader's SyncGroup
//!   brings the assignments. A member that has not sent SyncGroup within the rebalance
//!   timeout is removed and the group rebalances.
//! - **Stable**: Heartbeats keep members alive; a member without one for its session timeout
//!   is removed and the group rebalances. Heartbeats during a rebalance answer
//!   `REBALANCE_IN_PROGRESS` so members rejoin.
//! - **Dead**: a deleted group. It is forgotten at once; queries answer `None`.
//!
//! KIP-394 (JoinGroup v4+): a dynamic member without an id gets `MEMBER_ID_REQUIRED` and an
//! id, remembered for one session timeout, and must rejoin with it. KIP-345 (static
//! membership): a member with a `group.instance.id` that restarts within its session timeout
//! takes over its old incarnation's place and assignment, without a rebalance when the group
//! is Stable and the selected protocol would not change; the old member id is fenced
//! (`FENCED_INSTANCE_ID`).
//!
//! # Durable state
//!
//! The coordinator holds groups in memory; what must survive a move of the group to
//! another process comes out of [`Coordinator::poll_persist`] as a [`GroupSnapshot`]
//! whenever a generation settles (Stable after the leader's SyncGroup, Empty after a
//! rebalance that left nobody, a static member replaced in place) or a group goes (deleted
//! or evicted: a deletion). The driver encodes it ([`GroupSnapshot::encode`]) and stores
//! it; a new owner decodes it and calls [`Coordinator::restore`], which puts the group
//! back Stable or Empty in the same generation with every session restarting then, so
//! members that keep heartbeating see no rebalance. [`Coordinator::unload`] lets go of
//! groups that moved away, answering their parked requests. See [`snapshot`].
//!
//! Every collection grown by input is capped by [`GroupConfig`]: groups, members per group,
//! outstanding KIP-394 ids, protocols and metadata bytes per member, assignment bytes per
//! SyncGroup, and over all groups: bytes of metadata and assignments, outstanding KIP-394
//! ids. Every duration a client asks for is bounded too: session timeouts are refused
//! outside their range, rebalance timeouts are held to `max_rebalance_timeout`. Client ids
//! are kept to [`MAX_ID_PREFIX_BYTES`], so member ids always fit the wire.
//!
//! # Error codes
//!
//! Responses and the synchronous calls carry [`kafka_protocol::ErrorCode`]. The coordinator
//! produces these codes and no others:
//!
//! - `NONE` (0): success, as on the wire.
//! - `UNKNOWN_SERVER_ERROR` (-1): what Kafka answers when group state is too large to
//!   store, which is how this coordinator reports metadata or assignments above its caps.
//! - `COORDINATOR_NOT_AVAILABLE` (15): the coordinator holds `max_groups` groups and none
//!   can be evicted, or a coordinator-wide cap is reached (`max_state_bytes` of member
//!   metadata and assignments, `max_pending_members` KIP-394 ids); the client backs off
//!   and retries.
//! - `ILLEGAL_GENERATION` (22): the generation in the request is not the group's current
//!   one.
//! - `INCONSISTENT_GROUP_PROTOCOL` (23): the member's protocols are incompatible with the
//!   group's, or the first member joined with an empty protocol type or protocol list.
//! - `INVALID_GROUP_ID` (24): the group id is empty, or longer than `max_id_bytes`.
//! - `UNKNOWN_MEMBER_ID` (25): the group does not know this member.
//! - `INVALID_SESSION_TIMEOUT` (26): the session timeout is outside the configured range.
//! - `REBALANCE_IN_PROGRESS` (27): the group is rebalancing, so the member must rejoin.
//! - `INVALID_REQUEST` (42): a JoinGroup's `group.instance.id` is longer than
//!   `max_id_bytes`.
//! - `NON_EMPTY_GROUP` (68): the group to delete still has members.
//! - `GROUP_ID_NOT_FOUND` (69): the group to delete does not exist.
//! - `MEMBER_ID_REQUIRED` (79), KIP-394: the member must rejoin with the id it was given.
//! - `GROUP_MAX_SIZE_REACHED` (81): the group, or its outstanding KIP-394 ids, are at
//!   their cap.
//! - `FENCED_INSTANCE_ID` (82), KIP-345: another member with the same `group.instance.id`
//!   registered with a different member id.
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use kafka_groups::*;
//! use kafka_protocol::ErrorCode;
//!
//! let mut c = Coordinator::new(GroupConfig::default());
//! let now = Millis(0);
//! c.join(now, RequestId(1), JoinGroup {
//!     group_id: "g".into(),
//!     member_id: String::new(),
//!     group_instance_id: None,
//!     session_timeout: Duration::from_secs(10),
//!     rebalance_timeout: Duration::from_secs(60),
//!     protocol_type: "consumer".into(),
//!     protocols: vec![Protocol::new("range", Bytes::from_static(b"sub"))],
//!     client_id: "app".into(),
//!     client_host: "/127.0.0.1".into(),
//!     reason: None,
//!     require_known_member_id: false,
//! });
//! assert!(c.poll_response().is_none()); // parked for the initial rebalance delay
//! let deadline = c.poll_timeout().unwrap();
//! c.handle_timeout(deadline);
//! let (id, Response::Join(join)) = c.poll_response().unwrap() else { panic!() };
//! assert_eq!((id, join.error, join.generation_id), (RequestId(1), ErrorCode::NONE, 1));
//! assert_eq!(join.leader, join.member_id);
//! ```

mod coordinator;
mod group;
mod member_id;
pub mod snapshot;
mod timers;
pub mod types;

#[cfg(test)]
mod proptests;

pub use coordinator::Coordinator;
pub use member_id::MAX_ID_PREFIX_BYTES;
pub use snapshot::{GroupSnapshot, MemberSnapshot, StateError};
pub use types::{
    CoordinatorStats, GroupConfig, GroupDescription, GroupListing, GroupState, GroupStats,
    Heartbeat, HeartbeatResponse, JoinGroup, JoinResponse, JoinedMember, LeaveGroup, LeaveResponse,
    LeavingMember, MemberAssignment, MemberDescription, MemberLeaveResult, Millis, Protocol,
    RequestId, Response, SyncGroup, SyncResponse,
};
