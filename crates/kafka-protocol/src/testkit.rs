//! Test support: a small deterministic generator of random, version-valid messages, and
//! the generic round-trip and truncation checks run for every generated message.

use crate::types::{RawTaggedField, Uuid, VersionRange};
use crate::wire::Message;
use bytes::Bytes;
use bytestring::ByteString;

/// A seeded xorshift generator; proptest supplies the seeds, so failures reproduce.
pub(crate) struct Gen {
    state: u64,
    depth: u32,
}

impl Gen {
    pub(crate) fn new(seed: u64) -> Self {
        Gen {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            depth: 0,
        }
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.next() & 1 == 1
    }

    #[allow(dead_code)] // only the float64 fields of messages outside the table use it
    pub(crate) fn f64(&mut self) -> f64 {
        // Finite values only: NaN would not compare equal to itself.
        (self.next() as i64 as f64) / 1024.0
    }

    pub(crate) fn uuid(&mut self) -> Uuid {
        Uuid::from_u128((u128::from(self.next()) << 64) | u128::from(self.next()))
    }

    pub(crate) fn string(&mut self) -> ByteString {
        const PARTS: &[&str] = &["", "a", "topic-1", "é", "日本", "x.y_z", "🦀", " "];
        let n = self.below(4);
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(PARTS[self.below(PARTS.len() as u64) as usize]);
        }
        ByteString::from(s)
    }

    pub(crate) fn bytes(&mut self) -> Bytes {
        let n = match self.below(8) {
            0 => 0,
            7 => 5000, // crosses the encoder's zero-copy threshold
            _ => self.below(40) as usize,
        };
        Bytes::from((0..n).map(|_| self.next() as u8).collect::<Vec<u8>>())
    }

    /// Random bytes in one to three segments, so encoding a split value is exercised.
    pub(crate) fn record_set(&mut self) -> crate::types::RecordSet {
        let all = self.bytes();
        let mut out = crate::types::RecordSet::new();
        let mut at = 0;
        for _ in 0..self.below(3) {
            let cut = at + self.below((all.len() - at + 1) as u64) as usize;
            out.push(all.slice(at..cut));
            at = cut;
        }
        out.push(all.slice(at..));
        out
    }

    pub(crate) fn vec<T>(&mut self, mut f: impl FnMut(&mut Gen) -> T) -> Vec<T> {
        self.depth += 1;
        let max = if self.depth > 3 { 1 } else { 3 };
        let n = self.below(max + 1);
        let out = (0..n).map(|_| f(self)).collect();
        self.depth -= 1;
        out
    }

    /// Unknown tagged fields with tags that cannot clash with `known`, ascending.
    pub(crate) fn unknown_tags(&mut self, known: &[u32]) -> Vec<RawTaggedField> {
        let mut tags: Vec<u32> = (0..self.below(3))
            .map(|_| 1000 + self.below(5000) as u32)
            .collect();
        tags.sort_unstable();
        tags.dedup();
        tags.retain(|t| !known.contains(t));
        tags.into_iter()
            .map(|tag| RawTaggedField {
                tag,
                data: Bytes::from(
                    (0..self.below(6))
                        .map(|_| self.next() as u8)
                        .collect::<Vec<u8>>(),
                ),
            })
            .collect()
    }
}

/// Random values valid at a version (fields absent in it stay at their defaults).
pub(crate) trait Arbitrary: Sized {
    fn arbitrary(g: &mut Gen, v: i16) -> Self;
}

/// Type-erased checks for one message type.
pub(crate) struct MessageHooks {
    pub(crate) name: &'static str,
    pub(crate) versions: VersionRange,
    /// Encode a random value at the version, decode it, compare.
    pub(crate) roundtrip: fn(seed: u64, version: i16) -> Result<(), String>,
    /// Every strict prefix of an encoded random value must fail to decode.
    pub(crate) prefixes: fn(seed: u64, version: i16) -> Result<(), String>,
}

pub(crate) const fn hooks<M: Message + Arbitrary + std::fmt::Debug + PartialEq>() -> MessageHooks {
    MessageHooks {
        name: M::NAME,
        versions: M::VERSIONS,
        roundtrip: roundtrip::<M>,
        prefixes: prefixes::<M>,
    }
}

fn roundtrip<M: Message + Arbitrary + std::fmt::Debug + PartialEq>(
    seed: u64,
    v: i16,
) -> Result<(), String> {
    let value = M::arbitrary(&mut Gen::new(seed), v);
    let bytes = value
        .encode_to_bytes(v)
        .map_err(|e| format!("{} v{v}: encode failed: {e}", M::NAME))?;
    let back =
        M::decode_from(&bytes, v).map_err(|e| format!("{} v{v}: decode failed: {e}", M::NAME))?;
    if back != value {
        return Err(format!(
            "{} v{v}: round trip differs:\n{value:?}\n{back:?}",
            M::NAME
        ));
    }
    let again = back.encode_to_bytes(v).map_err(|e| e.to_string())?;
    if again != bytes {
        return Err(format!("{} v{v}: re-encoding differs", M::NAME));
    }
    Ok(())
}

fn prefixes<M: Message + Arbitrary + std::fmt::Debug + PartialEq>(
    seed: u64,
    v: i16,
) -> Result<(), String> {
    let value = M::arbitrary(&mut Gen::new(seed), v);
    let bytes = value.encode_to_bytes(v).map_err(|e| e.to_string())?;
    // Cap the work for the occasional large random payload.
    let step = (bytes.len() / 512).max(1);
    for n in (0..bytes.len()).step_by(step) {
        let prefix = bytes.slice(..n);
        if M::decode_from(&prefix, v).is_ok() {
            return Err(format!(
                "{} v{v}: a {n}-byte prefix of {} bytes decoded",
                M::NAME,
                bytes.len()
            ));
        }
    }
    Ok(())
}
