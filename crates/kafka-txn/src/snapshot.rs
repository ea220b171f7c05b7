//! The stored form of a transactional id's state ([`TxnMetadata`]).
//!
//! The coordinator writes one blob per transactional id on every transition (the
//! transaction log) and reads them back when it takes a shard over.
//!
//! # Encoding (version 1)
//!
//! Big-endian; `str` is a `u32` byte length and UTF-8.
//!
//! ```text
//! u8 version (1) | str transactional_id | i64 producer_id | i64 last_producer_id
//! | i16 producer_epoch | i16 last_producer_epoch | i32 timeout_ms | u8 state
//! | i64 start_ms | i64 last_update_ms | u32 partition count | (str topic | i32 partition)*
//! ```
//!
//! States are numbered 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
//! 4 CompleteCommit, 5 CompleteAbort, 6 Dead.
//!
//! The decoder trusts nothing: every length and count is checked against the bytes left
//! before anything is allocated (a partition takes at least 8 bytes, so a count cannot
//! promise more than the rest of the blob holds); truncated, over-long, non-UTF-8,
//! unknown-state or unknown-version input is an error, never a panic.

use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};

use crate::{SnapshotError, TxnMetadata, TxnState};

/// The encoding version written by [`encode`].
pub const SNAPSHOT_VERSION: u8 = 1;

/// Fixed part of the encoding after the id: pids, epochs, timeout, state, times, count.
const FIXED: usize = 8 + 8 + 2 + 2 + 4 + 1 + 8 + 8 + 4;
/// The smallest partition: an empty topic name and the partition number.
const MIN_PARTITION: usize = 4 + 4;

fn state_code(s: TxnState) -> u8 {
    match s {
        TxnState::Empty => 0,
        TxnState::Ongoing => 1,
        TxnState::PrepareCommit => 2,
        TxnState::PrepareAbort => 3,
        TxnState::CompleteCommit => 4,
        TxnState::CompleteAbort => 5,
        TxnState::Dead => 6,
    }
}

fn state_of(code: u8) -> Option<TxnState> {
    Some(match code {
        0 => TxnState::Empty,
        1 => TxnState::Ongoing,
        2 => TxnState::PrepareCommit,
        3 => TxnState::PrepareAbort,
        4 => TxnState::CompleteCommit,
        5 => TxnState::CompleteAbort,
        6 => TxnState::Dead,
        _ => return None,
    })
}

/// A length as written. Ids and topic names are bounded far below `u32::MAX` by the
/// request codec; a longer one saturates and the decoder then reports the blob truncated.
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u32(len_u32(s.len()));
    out.put_slice(s.as_bytes());
}

/// Encodes a state (version 1, see the module docs).
#[must_use]
pub fn encode(m: &TxnMetadata) -> Bytes {
    let size = 1
        + 4
        + m.transactional_id.len()
        + FIXED
        + m.partitions
            .iter()
            .map(|(t, _)| MIN_PARTITION + t.len())
            .sum::<usize>();
    let mut out = BytesMut::with_capacity(size);
    out.put_u8(SNAPSHOT_VERSION);
    put_str(&mut out, &m.transactional_id);
    out.put_i64(m.producer_id);
    out.put_i64(m.last_producer_id);
    out.put_i16(m.producer_epoch);
    out.put_i16(m.last_producer_epoch);
    out.put_i32(m.timeout_ms);
    out.put_u8(state_code(m.state));
    out.put_i64(m.start_ms);
    out.put_i64(m.last_update_ms);
    out.put_u32(len_u32(m.partitions.len()));
    for (topic, partition) in &m.partitions {
        put_str(&mut out, topic);
        out.put_i32(*partition);
    }
    out.freeze()
}

/// Decodes [`encode`]'s output (hostile input: never panics, allocates at most the
/// blob's size).
///
/// # Errors
///
/// [`SnapshotError`] for truncated input, an unknown version or state, bad UTF-8, a
/// repeated partition or bytes after the state.
pub fn decode(b: &[u8]) -> Result<TxnMetadata, SnapshotError> {
    let mut r = Reader { buf: b, at: 0 };
    let version = r.u8()?;
    if version != SNAPSHOT_VERSION {
        return Err(SnapshotError(format!("unsupported version {version}")));
    }
    let transactional_id = r.string()?;
    let producer_id = r.i64()?;
    let last_producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let last_producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let code = r.u8()?;
    let state = state_of(code).ok_or_else(|| SnapshotError(format!("unknown state {code}")))?;
    let start_ms = r.i64()?;
    let last_update_ms = r.i64()?;
    let count = r.u32()?;
    let count = usize::try_from(count).map_err(|_| truncated())?;
    if count > r.left() / MIN_PARTITION {
        return Err(truncated());
    }
    let mut partitions = BTreeSet::new();
    for _ in 0..count {
        let topic = r.string()?;
        let partition = r.i32()?;
        if !partitions.insert((topic, partition)) {
            return Err(SnapshotError("repeated partition".to_owned()));
        }
    }
    if r.left() != 0 {
        return Err(SnapshotError("bytes after the state".to_owned()));
    }
    Ok(TxnMetadata {
        transactional_id,
        producer_id,
        last_producer_id,
        producer_epoch,
        last_producer_epoch,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
    })
}

fn truncated() -> SnapshotError {
    SnapshotError("truncated".to_owned())
}

/// A cursor over untrusted bytes.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.at)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], SnapshotError> {
        let end = self.at.checked_add(n).ok_or_else(truncated)?;
        let s = self.buf.get(self.at..end).ok_or_else(truncated)?;
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.array::<1>()?[0])
    }

    fn i16(&mut self) -> Result<i16, SnapshotError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, SnapshotError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, SnapshotError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, SnapshotError> {
        let n = usize::try_from(self.u32()?).map_err(|_| truncated())?;
        let s = self.take(n)?;
        std::str::from_utf8(s)
            .map(str::to_owned)
            .map_err(|_| SnapshotError("not UTF-8".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> TxnMetadata {
        TxnMetadata {
            transactional_id: "tx-1".to_owned(),
            producer_id: 4711,
            last_producer_id: -1,
            producer_epoch: 3,
            last_producer_epoch: 2,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [("a".to_owned(), 0), ("b".to_owned(), 7)]
                .into_iter()
                .collect(),
            start_ms: 1_000,
            last_update_ms: 2_000,
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(decode(&encode(&m)).ok(), Some(m));
    }

    #[test]
    fn refuses_bad_input() {
        let b = encode(&sample());
        // Every strict prefix is truncated.
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "prefix {n}");
        }
        let mut extra = b.to_vec();
        extra.push(0);
        assert!(decode(&extra).is_err());
        let mut version = b.to_vec();
        version[0] = 2;
        assert!(decode(&version).is_err());
        // A partition count far beyond the bytes present.
        let mut count = b.to_vec();
        let at = 1 + 4 + 4 + FIXED - 4;
        count[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&count).is_err());
        // An unknown state.
        let mut state = b.to_vec();
        state[1 + 4 + 4 + 8 + 8 + 2 + 2 + 4] = 9;
        assert!(decode(&state).is_err());
    }

    fn any_state() -> impl Strategy<Value = TxnState> {
        (0u8..7).prop_map(|c| state_of(c).unwrap_or(TxnState::Empty))
    }

    proptest! {
        #[test]
        fn round_trips(
            id in ".{0,20}",
            pid in any::<i64>(), last_pid in any::<i64>(),
            epoch in any::<i16>(), last_epoch in any::<i16>(),
            timeout in any::<i32>(), state in any_state(),
            start in any::<i64>(), update in any::<i64>(),
            partitions in proptest::collection::btree_set((".{0,10}", any::<i32>()), 0..8),
        ) {
            let m = TxnMetadata {
                transactional_id: id, producer_id: pid, last_producer_id: last_pid,
                producer_epoch: epoch, last_producer_epoch: last_epoch, timeout_ms: timeout,
                state, partitions, start_ms: start, last_update_ms: update,
            };
            prop_assert_eq!(decode(&encode(&m)).ok(), Some(m));
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }

        #[test]
        fn mutated_blobs_never_panic(at in 0usize..64, byte in any::<u8>()) {
            let mut b = encode(&sample()).to_vec();
            if let Some(x) = b.get_mut(at) {
                *x = byte;
            }
            if let Ok(m) = decode(&b) {
                // Whatever decodes round-trips.
                prop_assert_eq!(decode(&encode(&m)).ok(), Some(m));
            }
        }
    }
}
