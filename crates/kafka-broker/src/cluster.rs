//! Placement of partitions and groups over the live gateways.
//!
//! Every gateway computes the same answer from the same live view, with no exchange:
//! rendezvous (highest random weight) hashing. Each live node id gets a weight for the
//! key, and the node with the highest weight owns it. When a node leaves, only the keys
//! it owned move (each to the node with the next highest weight for that key); when a
//! node joins, it takes only the keys where it now weighs most.
//!
//! The weight is fixed so that every gateway, of any build, agrees:
//!
//! ```text
//! weight(node, key) = mix64(fnv1a64(be32(node_id) ++ key))
//! key (partition)   = "p" ++ be32(len(topic)) ++ topic ++ be32(partition)
//! key (group shard) = "s" ++ be32(shard)
//! ```
//!
//! `fnv1a64` is 64-bit FNV-1a (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`);
//! `mix64` is the MurmurHash3 64-bit finaliser, which spreads FNV's weak high bits. There
//! is no per-process seed. Equal weights (practically never) go to the lower node id.
//!
//! Groups are not placed one by one: each lives in one of
//! [`GROUP_SHARDS`](kafka_store::cluster::GROUP_SHARDS) coordinator shards
//! ([`group_shard`]), and the shard is what is placed. A shard moves as a whole, so the
//! gateway taking it over reads that shard's stored group states and offsets once
//! (`OffsetStore::acquire_shard`) and then serves every group in it, and each shard has one
//! writer at a time, like a partition of Kafka's `__consumer_offsets`. With 16 shards the
//! spread over a few gateways is coarse (three gateways hold about 5 or 6 shards each).

use kafka_store::cluster::{GROUP_SHARDS, LiveView, Member, Membership, group_shard};
use std::sync::Arc;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The weight of `node_id` for `key` (the encoded key, see the module docs).
pub fn weight(node_id: i32, key: &[u8]) -> u64 {
    let h = fnv1a(FNV_OFFSET, &node_id.to_be_bytes());
    mix64(fnv1a(h, key))
}

fn partition_key(topic: &str, partition: i32) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + topic.len());
    k.push(b'p');
    k.extend_from_slice(&len32(topic).to_be_bytes());
    k.extend_from_slice(topic.as_bytes());
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

fn shard_key(shard: u32) -> [u8; 5] {
    let b = shard.to_be_bytes();
    [b's', b[0], b[1], b[2], b[3]]
}

/// A string's length as the key encodes it (lengths past `u32::MAX` saturate; Kafka
/// strings are at most `i16::MAX` bytes).
fn len32(s: &str) -> u32 {
    u32::try_from(s.len()).unwrap_or(u32::MAX)
}

/// The node with the highest weight for `key` among `nodes`.
fn owner(nodes: impl Iterator<Item = i32>, key: &[u8]) -> Option<i32> {
    nodes
        .map(|n| (weight(n, key), std::cmp::Reverse(n)))
        .max()
        .map(|(_, std::cmp::Reverse(n))| n)
}

/// The leader of `topic`'s `partition` in `view`; `None` when the view is empty.
pub fn leader(view: &LiveView, topic: &str, partition: i32) -> Option<i32> {
    owner(
        view.members.iter().map(|m| m.node_id),
        &partition_key(topic, partition),
    )
}

/// The coordinator of coordinator shard `shard` in `view`; `None` when the view is empty.
pub fn shard_coordinator(view: &LiveView, shard: u32) -> Option<i32> {
    owner(view.members.iter().map(|m| m.node_id), &shard_key(shard))
}

/// The coordinator of the group (or other coordinator key) `key` in `view`: the
/// coordinator of its shard; `None` when the view is empty.
pub fn coordinator(view: &LiveView, key: &str) -> Option<i32> {
    shard_coordinator(view, group_shard(key))
}

/// The controller Metadata and DescribeCluster name: the lowest live node id.
pub fn controller(view: &LiveView) -> Option<i32> {
    view.members.first().map(|m| m.node_id)
}

/// What one request sees of the membership: the view when it started, this gateway's
/// node id and whether it held its lease then. A request decides with one snapshot, so
/// a view change in the middle of it cannot make it answer from two views.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) view: Arc<LiveView>,
    pub(crate) me: i32,
    /// Whether this gateway may act as an owner: it holds its lease, nothing holds it
    /// back ([`Membership::acts_as_owner`]) and it is in the view.
    pub(crate) owner: bool,
}

impl Route {
    /// A snapshot of `membership` now.
    pub(crate) fn of(membership: &dyn Membership) -> Route {
        let view = membership.view();
        let me = membership.me().node_id;
        let owner = membership.acts_as_owner() && view.contains(me);
        Route { view, me, owner }
    }

    /// Whether this gateway leads `topic`'s `partition`.
    pub(crate) fn leads(&self, topic: &str, partition: i32) -> bool {
        self.owner && leader(&self.view, topic, partition) == Some(self.me)
    }

    /// Whether this gateway coordinates the group `key`.
    pub(crate) fn coordinates(&self, key: &str) -> bool {
        self.coordinates_shard(group_shard(key))
    }

    /// Whether this gateway coordinates coordinator shard `shard`.
    pub(crate) fn coordinates_shard(&self, shard: u32) -> bool {
        self.owner && shard_coordinator(&self.view, shard) == Some(self.me)
    }

    /// The shards this gateway coordinates, as a bit set (bit `s` for shard `s`).
    pub(crate) fn shards(&self) -> u32 {
        (0..GROUP_SHARDS)
            .filter(|s| self.coordinates_shard(*s))
            .fold(0, |set, s| set | (1 << s))
    }
}

/// The address of `member` for the listener named `listener`, or its first listener's
/// when it has none of that name; `None` when it advertises no listener.
pub(crate) fn address<'a>(member: &'a Member, listener: &str) -> Option<(&'a str, u16)> {
    member
        .listeners
        .iter()
        .find(|l| l.name == listener)
        .or_else(|| member.listeners.first())
        .map(|l| (l.host.as_str(), l.port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_store::cluster::Member;
    use proptest::prelude::*;

    fn view(ids: &[i32]) -> LiveView {
        let mut members: Vec<Member> = ids
            .iter()
            .map(|&node_id| Member {
                node_id,
                epoch: 1,
                listeners: Vec::new(),
            })
            .collect();
        members.sort();
        members.dedup_by_key(|m| m.node_id);
        LiveView {
            members,
            version: 1,
        }
    }

    const PINNED_THREE: [i32; 16] = [1, 1, 1, 2, 1, 2, 1, 2, 1, 3, 3, 2, 2, 3, 3, 2];
    const PINNED_TWO: [i32; 16] = [1, 1, 1, 2, 1, 2, 1, 2, 1, 1, 1, 2, 2, 2, 2, 2];

    #[test]
    fn the_hash_is_fixed() {
        // FNV-1a of the empty input is the offset basis; of "a" the published value.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix64(0), 0);
        // The same inputs give the same weight; different nodes, different weights.
        assert_eq!(weight(1, b"k"), weight(1, b"k"));
        assert_ne!(weight(1, b"k"), weight(2, b"k"));
    }

    #[test]
    fn an_empty_view_places_nothing() {
        let v = view(&[]);
        assert_eq!(leader(&v, "t", 0), None);
        assert_eq!(coordinator(&v, "g"), None);
        assert_eq!(controller(&v), None);
    }

    #[test]
    fn one_node_owns_everything() {
        let v = view(&[7]);
        for p in 0..50 {
            assert_eq!(leader(&v, "t", p), Some(7));
        }
        assert_eq!(coordinator(&v, "g"), Some(7));
        assert_eq!(controller(&v), Some(7));
    }

    #[test]
    fn partitions_are_balanced() {
        let v = view(&[1, 2, 3]);
        let mut leaders = [0usize; 3];
        let n = 30_000;
        for i in 0..n {
            let l = leader(&v, &format!("topic-{}", i % 100), i / 100).unwrap_or(0);
            leaders[usize::try_from(l - 1).unwrap_or(0)] += 1;
        }
        // Each node within 5% of a third.
        for count in &leaders {
            let share = *count as f64 / f64::from(n);
            assert!((share - 1.0 / 3.0).abs() < 0.05, "{leaders:?}");
        }
    }

    #[test]
    fn the_placement_of_shards_is_fixed() {
        // Every build must agree: these are the owners of shards 0..16 over nodes 1, 2, 3
        // and over 1, 2 (the keys and weights of the module docs).
        let owners = |ids: &[i32]| -> Vec<i32> {
            let v = view(ids);
            (0..GROUP_SHARDS)
                .map(|s| shard_coordinator(&v, s).unwrap_or(-1))
                .collect()
        };
        assert_eq!(owners(&[1, 2, 3]), PINNED_THREE.to_vec());
        assert_eq!(owners(&[1, 2]), PINNED_TWO.to_vec());
        // A group follows its shard.
        let v = view(&[1, 2, 3]);
        for g in ["", "a", "orders", "group-17"] {
            assert_eq!(
                coordinator(&v, g),
                shard_coordinator(&v, group_shard(g)),
                "{g}"
            );
        }
        // Each of three gateways coordinates some shards.
        for node in [1, 2, 3] {
            assert!(PINNED_THREE.iter().filter(|n| **n == node).count() >= 3);
        }
    }

    proptest! {
        #[test]
        fn placement_is_deterministic_and_live(
            ids in proptest::collection::btree_set(-5i32..100, 1..8),
            topic in "[a-z]{1,12}",
            partition in 0i32..1000,
        ) {
            let ids: Vec<i32> = ids.into_iter().collect();
            let v = view(&ids);
            let mut reversed = ids.clone();
            reversed.reverse();
            let l = leader(&v, &topic, partition);
            prop_assert_eq!(l, leader(&view(&reversed), &topic, partition));
            prop_assert!(l.is_some_and(|l| ids.contains(&l)));
            let c = coordinator(&v, &topic);
            prop_assert!(c.is_some_and(|c| ids.contains(&c)));
        }

        #[test]
        fn only_a_removed_nodes_keys_move(
            ids in proptest::collection::btree_set(0i32..50, 2..8),
            gone in 0usize..8,
            keys in proptest::collection::vec(("[a-z]{1,8}", 0i32..64), 1..64),
        ) {
            let ids: Vec<i32> = ids.into_iter().collect();
            let gone = ids[gone % ids.len()];
            let before = view(&ids);
            let rest: Vec<i32> = ids.iter().copied().filter(|n| *n != gone).collect();
            let after = view(&rest);
            for (topic, p) in &keys {
                let was = leader(&before, topic, *p);
                let now = leader(&after, topic, *p);
                if was != Some(gone) {
                    prop_assert_eq!(was, now);
                } else {
                    prop_assert!(now.is_some_and(|n| n != gone));
                }
                let was = coordinator(&before, topic);
                let now = coordinator(&after, topic);
                if was != Some(gone) {
                    prop_assert_eq!(was, now);
                }
                // A node joining takes keys only for itself.
                let back = leader(&before, topic, *p);
                let from = leader(&after, topic, *p);
                prop_assert!(back == from || back == Some(gone));
            }
        }
    }
}
