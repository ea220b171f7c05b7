//! Zigzag varints as records use them (protobuf style, least significant group first).
//!
//! ```text
//! value  -> zigzag: (v << 1) ^ (v >> 63)   so small negatives stay short
//! zigzag -> groups of 7 bits, low first, bit 7 set on every byte but the last
//! varint  (i32): at most 5 bytes
//! varlong (i64): at most 10 bytes
//! ```
//!
//! Decoding accepts exactly what Kafka's `ByteUtils.readVarint/readVarlong` accept:
//! non-minimal encodings are fine, a sixth (eleventh) continuation byte is not, and bits
//! beyond the type's width are dropped.

use bytes::BufMut;

/// Why a varint could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ended before the last byte.
    Truncated,
    /// More bytes than the type allows.
    TooLong,
}

#[inline]
fn read_raw(buf: &[u8], pos: &mut usize, max_bytes: u32) -> Result<u64, VarintError> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    for _ in 0..max_bytes {
        let Some(&byte) = buf.get(*pos) else {
            return Err(VarintError::Truncated);
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
    Err(VarintError::TooLong)
}

/// Reads a zigzag varint (i32) at `*pos`, advancing it.
#[inline(always)]
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, VarintError> {
    // One-byte values (-64..=63) are the common case for lengths, deltas and counts.
    if let Some(&byte) = buf.get(*pos)
        && byte & 0x80 == 0
    {
        *pos += 1;
        return Ok(((byte >> 1) as i32) ^ -((byte & 1) as i32));
    }
    let raw = read_raw(buf, pos, 5)? as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zigzag varlong (i64) at `*pos`, advancing it.
#[inline]
pub(crate) fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, VarintError> {
    let raw = read_raw(buf, pos, 10)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

#[inline]
fn zigzag32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

#[inline]
fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn raw_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[inline]
fn put_raw(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Encoded size of a zigzag varint.
#[inline]
pub(crate) fn varint_len(v: i32) -> usize {
    raw_len(zigzag32(v))
}

/// Encoded size of a zigzag varlong.
#[inline]
pub(crate) fn varlong_len(v: i64) -> usize {
    raw_len(zigzag64(v))
}

/// Appends a zigzag varint.
#[inline]
pub(crate) fn put_varint(out: &mut impl BufMut, v: i32) {
    put_raw(out, zigzag32(v));
}

/// Appends a zigzag varlong.
#[inline]
pub(crate) fn put_varlong(out: &mut impl BufMut, v: i64) {
    put_raw(out, zigzag64(v));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lengths_at_every_group_boundary() {
        for shift in 0..64 {
            for raw in [(1u64 << shift) - 1, 1u64 << shift, (1u64 << shift) + 1] {
                let mut out = Vec::new();
                put_raw(&mut out, raw);
                assert_eq!(raw_len(raw), out.len(), "{raw:#x}");
            }
        }
        assert_eq!(raw_len(u64::MAX), 10);
    }

    #[test]
    fn known_encodings() {
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(varint_len(v), bytes.len());
            let mut pos = 0;
            assert_eq!(read_varint(bytes, &mut pos), Ok(v));
            assert_eq!(pos, bytes.len());
        }
    }

    #[test]
    fn too_long_and_truncated() {
        let mut pos = 0;
        assert_eq!(
            read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut pos),
            Err(VarintError::TooLong)
        );
        let mut pos = 0;
        assert_eq!(
            read_varint(&[0x80, 0x80], &mut pos),
            Err(VarintError::Truncated)
        );
        let mut pos = 0;
        assert_eq!(
            read_varlong(&[0xff; 11], &mut pos),
            Err(VarintError::TooLong)
        );
        // Non-minimal encodings are accepted, as Kafka does.
        let mut pos = 0;
        assert_eq!(read_varint(&[0x80, 0x00], &mut pos), Ok(0));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varint(&out, &mut pos), Ok(v));
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varlong(&out, &mut pos), Ok(v));
        }
    }
}
