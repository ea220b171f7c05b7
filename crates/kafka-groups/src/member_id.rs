//! Member ids: `{client_id}-{uuid-like}` for dynamic members and `{group_instance_id}-{uuid-like}`
//! for static ones, as Kafka forms them.
//!
//! The suffix comes from a counter mixed with a seed instead of a random source, so a test
//! that replays the same inputs sees the same ids. The counter is pushed through a bijection
//! (an odd multiplier, then the splitmix64 finaliser), so the first 64 bits of the suffix
//! differ for every id one generator hands out, whatever the seed.
//!
//! The prefix comes from the client (its client id or `group.instance.id`, each up to
//! 32 767 bytes on the wire). Only its first [`MAX_ID_PREFIX_BYTES`] bytes are used, so
//! every member id fits the protocol's string and stays small in every response that
//! lists members.

/// Longest prefix of a member id, in bytes (cut back to a character boundary).
pub const MAX_ID_PREFIX_BYTES: usize = 255;

/// `s` cut to at most `max` bytes on a character boundary.
pub(crate) fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[derive(Debug)]
pub(crate) struct MemberIds {
    seed: u64,
    counter: u64,
}

impl MemberIds {
    pub(crate) fn new(seed: u64) -> Self {
        Self { seed, counter: 0 }
    }

    pub(crate) fn next(&mut self, prefix: &str) -> String {
        let prefix = truncated(prefix, MAX_ID_PREFIX_BYTES);
        self.counter = self.counter.wrapping_add(1);
        let hi = mix(self
            .seed
            .wrapping_add(self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let lo = mix(hi ^ self.seed.rotate_left(32));
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xffff,
            hi & 0xffff,
            lo >> 48,
            lo & 0xffff_ffff_ffff
        )
    }
}

/// The splitmix64 finaliser: a bijection on `u64` with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_prefixed_and_reproducible() {
        let mut a = MemberIds::new(7);
        let mut b = MemberIds::new(7);
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let id = a.next("client");
            assert_eq!(id, b.next("client"));
            assert!(id.starts_with("client-"));
            assert_eq!(id.len(), "client-".len() + 36);
            assert!(seen.insert(id));
        }
        assert_ne!(MemberIds::new(1).next("c"), MemberIds::new(2).next("c"));
    }

    #[test]
    fn long_prefixes_are_cut_on_a_character_boundary() {
        let mut ids = MemberIds::new(3);
        let long = "é".repeat(20_000);
        let id = ids.next(&long);
        assert!(id.len() <= MAX_ID_PREFIX_BYTES + 1 + 36, "{}", id.len());
        assert!(id.starts_with(truncated(&long, MAX_ID_PREFIX_BYTES)));
        assert_eq!(truncated(&long, MAX_ID_PREFIX_BYTES).len(), 254);
        assert_eq!(truncated("short", MAX_ID_PREFIX_BYTES), "short");
    }
}
