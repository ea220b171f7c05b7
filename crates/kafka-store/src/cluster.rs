//! The membership seam for several gateways in front of one store: which gateways are
//! alive, and whether this one still holds its lease.
//!
//! Gateways coordinate only through the store (with the bridge: leases recorded in Iggy,
//! see `iggy_kafka_bridge::members`). Each gateway has a node id from the configured
//! broker list and, per start, an epoch greater than any earlier epoch of that node id.
//! A gateway that cannot renew its lease within the session timeout stops acting as an
//! owner ([`Membership::holds_lease`] turns false) before the others consider it gone,
//! so no two gateways act as owner of the same partition or group at once (fencing by
//! time, on each gateway's own monotonic clock; no clock synchronisation is assumed).
//!
//! [`SingleMember`] is the membership of a gateway alone (the embedded store, or the
//! bridge without a broker list): itself, always alive.

use std::fmt;
use std::sync::Arc;

/// Coordinator shards: every consumer group lives in one ([`group_shard`]), and a shard
/// is coordinated by one gateway at a time, its only writer (Kafka's partitions of
/// `__consumer_offsets`). Fixed: every gateway and every start must agree on it.
pub const GROUP_SHARDS: u32 = 16;

/// The coordinator shard of `group`: FNV-1a (64-bit) of the group id's UTF-8 bytes,
/// modulo [`GROUP_SHARDS`]. Stable across processes, platforms and releases.
pub fn group_shard(group: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in group.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The remainder is below GROUP_SHARDS, a u32.
    (h % u64::from(GROUP_SHARDS)) as u32
}
use tokio::sync::watch;

/// One listener of a gateway as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberListener {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, or a custom name).
    pub name: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

/// A live gateway.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    /// The node id (`IGGY_KAFKA_NODE_ID`), unique among the gateways.
    pub node_id: i32,
    /// This start's epoch: greater than every earlier epoch of the same node id.
    pub epoch: u64,
    /// Where clients reach it, per listener.
    pub listeners: Vec<MemberListener>,
}

/// The gateways alive as one gateway sees them, by node id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveView {
    /// Live members, sorted by node id, one per node id.
    pub members: Vec<Member>,
    /// Increases with every change of the view this gateway observes (local to it).
    pub version: u64,
}

impl LiveView {
    /// Whether `node_id` is alive.
    pub fn contains(&self, node_id: i32) -> bool {
        self.members
            .binary_search_by_key(&node_id, |m| m.node_id)
            .is_ok()
    }
}

/// Membership of the gateways sharing a store.
pub trait Membership: Send + Sync + fmt::Debug + 'static {
    /// This gateway.
    fn me(&self) -> &Member;

    /// The live gateways now (this one included while it holds its lease).
    fn view(&self) -> Arc<LiveView>;

    /// Changes of the view, as they are observed.
    fn subscribe(&self) -> watch::Receiver<Arc<LiveView>>;

    /// Whether this gateway still holds its lease: false once its last renewal is older
    /// than the session timeout less a safety margin; an owner stops acting as one then.
    fn holds_lease(&self) -> bool;

    /// Whether this gateway may act as the owner of what the view places on it now: it
    /// holds its lease and nothing else holds it back (a membership may also require a
    /// recent enough view, or a wait after joining, so that a previous owner has stopped
    /// first). Checked by every request that acts on ownership.
    fn acts_as_owner(&self) -> bool {
        self.holds_lease()
    }
}

/// A gateway alone: itself, always alive, lease always held.
#[derive(Debug)]
pub struct SingleMember {
    me: Member,
    view: watch::Sender<Arc<LiveView>>,
}

impl SingleMember {
    /// The membership of `me` alone.
    pub fn new(me: Member) -> SingleMember {
        let view = Arc::new(LiveView {
            members: vec![me.clone()],
            version: 1,
        });
        SingleMember {
            me,
            view: watch::Sender::new(view),
        }
    }
}

impl Membership for SingleMember {
    fn me(&self) -> &Member {
        &self.me
    }

    fn view(&self) -> Arc<LiveView> {
        self.view.borrow().clone()
    }

    fn subscribe(&self) -> watch::Receiver<Arc<LiveView>> {
        self.view.subscribe()
    }

    fn holds_lease(&self) -> bool {
        true
    }
}

/// A membership set from outside: the view and the lease are whatever its owner last set.
/// For embedders with their own liveness mechanism, and for tests that move ownership
/// between gateways in one process.
#[derive(Debug)]
pub struct ManualMembership {
    me: Member,
    view: watch::Sender<Arc<LiveView>>,
    lease: std::sync::atomic::AtomicBool,
}

impl ManualMembership {
    /// `me`, holding its lease, in a view of `members` (sorted and deduplicated by node
    /// id here; include `me` for it to own anything).
    pub fn new(me: Member, members: Vec<Member>) -> ManualMembership {
        let view = watch::Sender::new(Arc::new(LiveView::default()));
        let m = ManualMembership {
            me,
            view,
            lease: std::sync::atomic::AtomicBool::new(true),
        };
        m.set_members(members);
        m
    }

    /// Replaces the live members (a new view version is published).
    pub fn set_members(&self, mut members: Vec<Member>) {
        members.sort_by_key(|m| m.node_id);
        members.dedup_by_key(|m| m.node_id);
        self.view.send_modify(|v| {
            *v = Arc::new(LiveView {
                members,
                version: v.version + 1,
            });
        });
    }

    /// Sets whether this gateway holds its lease.
    pub fn set_lease(&self, held: bool) {
        self.lease.store(held, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Membership for ManualMembership {
    fn me(&self) -> &Member {
        &self.me
    }

    fn view(&self) -> Arc<LiveView> {
        self.view.borrow().clone()
    }

    fn subscribe(&self) -> watch::Receiver<Arc<LiveView>> {
        self.view.subscribe()
    }

    fn holds_lease(&self) -> bool {
        self.lease.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    #[test]
    fn the_shard_of_a_group_is_fixed() {
        // FNV-1a 64 of "" is the offset basis; of "a" a known constant.
        assert_eq!(group_shard(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        assert_eq!(group_shard("a"), (0xaf63_dc4c_8601_ec8cu64 % 16) as u32);
        let mut seen = [0u32; GROUP_SHARDS as usize];
        for i in 0..1600 {
            seen[group_shard(&format!("group-{i}")) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 50), "shards unbalanced: {seen:?}");
    }

    fn member(node_id: i32) -> Member {
        Member {
            node_id,
            epoch: 1,
            listeners: Vec::new(),
        }
    }

    #[test]
    fn a_manual_membership_publishes_what_it_is_given() {
        let m = ManualMembership::new(member(2), vec![member(3), member(2), member(3)]);
        let mut rx = m.subscribe();
        let ids = |v: &LiveView| v.members.iter().map(|m| m.node_id).collect::<Vec<_>>();
        assert_eq!(ids(&m.view()), vec![2, 3]);
        let before = m.view().version;
        m.set_members(vec![member(1)]);
        assert!(rx.has_changed().unwrap());
        assert_eq!(ids(&rx.borrow_and_update()), vec![1]);
        assert!(m.view().version > before);
        assert!(m.holds_lease());
        m.set_lease(false);
        assert!(!m.holds_lease());
    }
}
