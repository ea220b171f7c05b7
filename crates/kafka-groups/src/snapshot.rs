//! A group's durable state, and its binary encoding.
//!
//! A coordinator keeps what it must not lose when another process takes the group over:
//! the settled outcome of the last completed generation. That is what Kafka writes to
//! `__consumer_offsets` as group metadata, and it is written at the same moments: when the
//! leader's assignment makes a generation Stable, when a rebalance leaves the group Empty,
//! when a static member is replaced without a rebalance, and (as a deletion) when the group
//! is deleted or forgotten. A rebalance in progress is never persisted: the next owner
//! starts from the last settled generation, and members that had already moved on rejoin.
//!
//! Unlike Kafka, every protocol a member offered is kept, not only the selected one, so a
//! member that rejoins after a move with unchanged protocols is recognised as unchanged
//! and a follower's rejoin does not force a rebalance.
//!
//! # Encoding (version 1)
//!
//! Big-endian; `str` is a `u32` byte length and UTF-8, `bytes` a `u32` length and the
//! bytes, `opt<T>` a `u8` flag (0 absent, 1 present) then `T`.
//!
//! ```text
//! u8 version (1) | str group_id | u8 state (0 Empty, 1 Stable) | i32 generation
//! | opt<str> protocol_type | opt<str> protocol_name | opt<str> leader
//! | u32 member count | member*
//! member = str member_id | opt<str> group_instance_id | str client_id | str client_host
//!        | u32 session_timeout_ms | u32 rebalance_timeout_ms
//!        | u32 protocol count | (str name | bytes metadata)* | bytes assignment
//! ```
//!
//! The decoder trusts nothing: every length and count is checked against the bytes left
//! before anything is allocated, so a hostile blob costs at most its own size; truncated,
//! over-long, non-UTF-8 or unknown-version input is an error, never a panic. What the
//! blob says is checked again against the coordinator's caps when it is restored
//! ([`crate::Coordinator::restore`]).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use crate::types::{GroupState, Protocol};

/// The encoding version written by [`GroupSnapshot::encode`].
pub const SNAPSHOT_VERSION: u8 = 1;

/// Why a group state could not be decoded or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The bytes end before the state does.
    #[error("group state truncated")]
    Truncated,
    /// Written by a newer encoding this build does not read.
    #[error("group state version {0} is not supported")]
    UnsupportedVersion(u8),
    /// The bytes decode but do not describe a possible group.
    #[error("group state invalid: {0}")]
    Invalid(&'static str),
    /// The state is valid but exceeds this coordinator's caps (groups, members, bytes).
    #[error("group state over the coordinator's caps: {0}")]
    OverCapacity(&'static str),
    /// The coordinator already holds a group of that id.
    #[error("group already held")]
    AlreadyHeld,
}

/// One member as persisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSnapshot {
    /// The member id.
    pub member_id: String,
    /// Its `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// From its latest JoinGroup.
    pub client_id: String,
    /// From its latest JoinGroup.
    pub client_host: String,
    /// Its session timeout.
    pub session_timeout: Duration,
    /// Its rebalance timeout.
    pub rebalance_timeout: Duration,
    /// Every protocol it offered, in its preference order.
    pub protocols: Vec<Protocol>,
    /// Its assignment in the persisted generation.
    pub assignment: Bytes,
}

/// A group's durable state: its last settled generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSnapshot {
    /// The group.
    pub group_id: String,
    /// [`GroupState::Stable`] (with members) or [`GroupState::Empty`] (without).
    pub state: GroupState,
    /// The generation.
    pub generation: i32,
    /// The protocol type, once a member ever joined.
    pub protocol_type: Option<String>,
    /// The selected protocol when Stable.
    pub protocol_name: Option<String>,
    /// The leader's member id when Stable.
    pub leader: Option<String>,
    /// Members ordered by member id.
    pub members: Vec<MemberSnapshot>,
}

fn millis_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A length as written; lengths are bounded by what the coordinator accepts (far below
/// `u32::MAX`), saturating otherwise (the decoder then reports the blob as truncated).
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(len_u32(b.len()));
    out.put_slice(b);
}

fn put_opt(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            out.put_u8(1);
            put_bytes(out, s.as_bytes());
        }
        None => out.put_u8(0),
    }
}

impl GroupSnapshot {
    /// The version-1 encoding (see the module docs).
    #[must_use]
    pub fn encode(&self) -> Bytes {
        let size: usize = 64
            + self.group_id.len()
            + self
                .members
                .iter()
                .map(|m| {
                    64 + m.member_id.len()
                        + m.group_instance_id.as_ref().map_or(0, String::len)
                        + m.client_id.len()
                        + m.client_host.len()
                        + m.assignment.len()
                        + m.protocols
                            .iter()
                            .map(|p| 8 + p.name.len() + p.metadata.len())
                            .sum::<usize>()
                })
                .sum::<usize>();
        let mut out = BytesMut::with_capacity(size);
        out.put_u8(SNAPSHOT_VERSION);
        put_bytes(&mut out, self.group_id.as_bytes());
        out.put_u8(u8::from(self.state == GroupState::Stable));
        out.put_i32(self.generation);
        put_opt(&mut out, self.protocol_type.as_deref());
        put_opt(&mut out, self.protocol_name.as_deref());
        put_opt(&mut out, self.leader.as_deref());
        out.put_u32(len_u32(self.members.len()));
        for m in &self.members {
            put_bytes(&mut out, m.member_id.as_bytes());
            put_opt(&mut out, m.group_instance_id.as_deref());
            put_bytes(&mut out, m.client_id.as_bytes());
            put_bytes(&mut out, m.client_host.as_bytes());
            out.put_u32(millis_u32(m.session_timeout));
            out.put_u32(millis_u32(m.rebalance_timeout));
            out.put_u32(len_u32(m.protocols.len()));
            for p in &m.protocols {
                put_bytes(&mut out, p.name.as_bytes());
                put_bytes(&mut out, &p.metadata);
            }
            put_bytes(&mut out, &m.assignment);
        }
        out.freeze()
    }

    /// Decodes [`GroupSnapshot::encode`]'s output. Byte fields share `blob`'s buffer.
    ///
    /// # Errors
    ///
    /// [`StateError::Truncated`], [`StateError::UnsupportedVersion`] or
    /// [`StateError::Invalid`] (bad UTF-8, a bad flag or state, bytes left over, a Stable
    /// group without members or the reverse).
    pub fn decode(blob: &Bytes) -> Result<GroupSnapshot, StateError> {
        let mut r = Reader { buf: blob, at: 0 };
        let version = r.u8()?;
        if version != SNAPSHOT_VERSION {
            return Err(StateError::UnsupportedVersion(version));
        }
        let group_id = r.string()?;
        let state = match r.u8()? {
            0 => GroupState::Empty,
            1 => GroupState::Stable,
            _ => return Err(StateError::Invalid("unknown state")),
        };
        let generation = r.i32()?;
        let protocol_type = r.opt_string()?;
        let protocol_name = r.opt_string()?;
        let leader = r.opt_string()?;
        // The smallest member is 29 bytes: a count cannot promise more than the rest holds.
        let count = r.count(29)?;
        let mut members = Vec::with_capacity(count);
        for _ in 0..count {
            let member_id = r.string()?;
            let group_instance_id = r.opt_string()?;
            let client_id = r.string()?;
            let client_host = r.string()?;
            let session_timeout = Duration::from_millis(u64::from(r.u32()?));
            let rebalance_timeout = Duration::from_millis(u64::from(r.u32()?));
            let n = r.count(8)?;
            let mut protocols = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.string()?;
                let metadata = r.bytes()?;
                protocols.push(Protocol { name, metadata });
            }
            let assignment = r.bytes()?;
            members.push(MemberSnapshot {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                protocols,
                assignment,
            });
        }
        if r.at != blob.len() {
            return Err(StateError::Invalid("bytes after the state"));
        }
        if (state == GroupState::Stable) == members.is_empty() {
            return Err(StateError::Invalid("state and members disagree"));
        }
        Ok(GroupSnapshot {
            group_id,
            state,
            generation,
            protocol_type,
            protocol_name,
            leader,
            members,
        })
    }
}

/// A cursor over untrusted bytes.
struct Reader<'a> {
    buf: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, StateError> {
        let end = self.at.checked_add(n).ok_or(StateError::Truncated)?;
        if end > self.buf.len() {
            return Err(StateError::Truncated);
        }
        let range = self.at..end;
        self.at = end;
        Ok(range)
    }

    fn u8(&mut self) -> Result<u8, StateError> {
        let r = self.take(1)?;
        Ok(self.buf[r.start])
    }

    fn u32(&mut self) -> Result<u32, StateError> {
        let r = self.take(4)?;
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buf[r]);
        Ok(u32::from_be_bytes(b))
    }

    fn i32(&mut self) -> Result<i32, StateError> {
        Ok(i32::from_be_bytes(self.u32()?.to_be_bytes()))
    }

    fn len(&mut self) -> Result<usize, StateError> {
        usize::try_from(self.u32()?).map_err(|_| StateError::Truncated)
    }

    /// A count of elements at least `min_size` bytes each, checked against what is left.
    fn count(&mut self, min_size: usize) -> Result<usize, StateError> {
        let n = self.len()?;
        if n.saturating_mul(min_size) > self.buf.len() - self.at {
            return Err(StateError::Truncated);
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<Bytes, StateError> {
        let n = self.len()?;
        let r = self.take(n)?;
        Ok(self.buf.slice(r))
    }

    fn string(&mut self) -> Result<String, StateError> {
        let n = self.len()?;
        let r = self.take(n)?;
        std::str::from_utf8(&self.buf[r])
            .map(str::to_owned)
            .map_err(|_| StateError::Invalid("a string is not UTF-8"))
    }

    fn opt_string(&mut self) -> Result<Option<String>, StateError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            _ => Err(StateError::Invalid("bad presence flag")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(id: &str) -> MemberSnapshot {
        MemberSnapshot {
            member_id: id.into(),
            group_instance_id: Some(format!("inst-{id}")),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(60),
            protocols: vec![
                Protocol::new("range", Bytes::from_static(b"sub")),
                Protocol::new("sticky", Bytes::new()),
            ],
            assignment: Bytes::from_static(b"assigned"),
        }
    }

    fn stable() -> GroupSnapshot {
        GroupSnapshot {
            group_id: "g".into(),
            state: GroupState::Stable,
            generation: 7,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: Some("a".into()),
            members: vec![member("a"), member("b")],
        }
    }

    #[test]
    fn a_state_round_trips_and_every_prefix_is_truncated() {
        let s = stable();
        let blob = s.encode();
        assert_eq!(blob[0], SNAPSHOT_VERSION);
        assert_eq!(GroupSnapshot::decode(&blob), Ok(s));
        for n in 0..blob.len() {
            assert_eq!(
                GroupSnapshot::decode(&blob.slice(..n)),
                Err(StateError::Truncated),
                "prefix of {n} bytes"
            );
        }
    }

    #[test]
    fn hostile_blobs_are_errors() {
        let blob = stable().encode();
        let mut newer = blob.to_vec();
        newer[0] = 2;
        assert_eq!(
            GroupSnapshot::decode(&Bytes::from(newer)),
            Err(StateError::UnsupportedVersion(2))
        );
        let mut longer = blob.to_vec();
        longer.push(0);
        assert!(matches!(
            GroupSnapshot::decode(&Bytes::from(longer)),
            Err(StateError::Invalid(_))
        ));
        // A member count of u32::MAX with nothing behind it allocates nothing.
        let mut huge = BytesMut::new();
        huge.put_u8(SNAPSHOT_VERSION);
        put_bytes(&mut huge, b"g");
        huge.put_u8(1);
        huge.put_i32(1);
        huge.put_slice(&[0, 0, 0]);
        huge.put_u32(u32::MAX);
        assert_eq!(
            GroupSnapshot::decode(&huge.freeze()),
            Err(StateError::Truncated)
        );
        // Stable without members, Empty with them.
        let mut empty = stable();
        empty.state = GroupState::Empty;
        assert!(matches!(
            GroupSnapshot::decode(&empty.encode()),
            Err(StateError::Invalid(_))
        ));
        let mut bad_utf8 = BytesMut::new();
        bad_utf8.put_u8(SNAPSHOT_VERSION);
        put_bytes(&mut bad_utf8, &[0xff, 0xfe]);
        assert!(matches!(
            GroupSnapshot::decode(&bad_utf8.freeze()),
            Err(StateError::Invalid(_))
        ));
    }

    fn text() -> impl Strategy<Value = String> {
        "[a-zé0-9-]{0,12}"
    }

    fn snapshot() -> impl Strategy<Value = GroupSnapshot> {
        let protocol =
            (text(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(|(n, m)| Protocol {
                name: n,
                metadata: Bytes::from(m),
            });
        let member = (
            text(),
            prop::option::of(text()),
            text(),
            text(),
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(protocol, 0..4),
            prop::collection::vec(any::<u8>(), 0..16),
        )
            .prop_map(
                |(id, inst, client, host, s, r, protocols, a)| MemberSnapshot {
                    member_id: id,
                    group_instance_id: inst,
                    client_id: client,
                    client_host: host,
                    session_timeout: Duration::from_millis(u64::from(s)),
                    rebalance_timeout: Duration::from_millis(u64::from(r)),
                    protocols,
                    assignment: Bytes::from(a),
                },
            );
        (
            text(),
            any::<i32>(),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::collection::vec(member, 0..5),
        )
            .prop_map(|(g, generation, pt, pn, leader, members)| GroupSnapshot {
                group_id: g,
                state: if members.is_empty() {
                    GroupState::Empty
                } else {
                    GroupState::Stable
                },
                generation,
                protocol_type: pt,
                protocol_name: pn,
                leader,
                members,
            })
    }

    proptest! {
        #[test]
        fn any_state_round_trips(s in snapshot()) {
            prop_assert_eq!(GroupSnapshot::decode(&s.encode()), Ok(s));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = GroupSnapshot::decode(&Bytes::from(bytes));
        }

        #[test]
        fn corrupted_states_decode_or_fail_and_restore_or_fail(
            s in snapshot(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut blob = s.encode().to_vec();
            for (at, byte) in flips {
                let i = at.index(blob.len());
                blob[i] ^= byte;
            }
            if let Ok(decoded) = GroupSnapshot::decode(&Bytes::from(blob)) {
                // Whatever decodes either restores into a consistent coordinator or is
                // refused with nothing changed.
                let mut c = crate::Coordinator::new(crate::GroupConfig::default());
                let id = decoded.group_id.clone();
                match c.restore(crate::Millis(5), decoded) {
                    Ok(()) => prop_assert!(c.group_state(&id).is_some()),
                    Err(_) => prop_assert!(c.list(&[]).is_empty()),
                }
                if let Err(e) = c.check_invariants() {
                    return Err(TestCaseError::fail(e));
                }
            }
        }
    }
}
