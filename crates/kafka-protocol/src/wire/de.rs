//! Decoding primitives, as `nom` parsers over a whole frame.
//!
//! Each parser takes the remaining input and a `field` path used in errors, and returns the
//! rest of the input with the value. They are thin wrappers over the cursor readers of
//! [`super::rd`], which generated messages use directly. Byte strings
//! and strings come back as [`Bytes`]/[`ByteString`] slices of the frame (see [`Cx`]), so
//! record data, SASL tokens and group metadata are never copied.
//!
//! ```text
//! classic string   int16 length (-1 = null) | bytes
//! compact string   uvarint (length + 1, 0 = null) | bytes
//! classic bytes    int32 length (-1 = null) | bytes
//! compact bytes    uvarint (length + 1, 0 = null) | bytes
//! classic array    int32 count (-1 = null) | elements
//! compact array    uvarint (count + 1, 0 = null) | elements
//! tagged section   uvarint count | (uvarint tag | uvarint size | size bytes)*
//! ```

use super::rd::{self, Res};
use crate::error::ProtocolError;
use crate::limits::DecodeLimits;
use crate::types::Uuid;
use bytes::Bytes;
use bytestring::ByteString;
use std::cell::Cell;

/// Result of a parser: the rest of the input and the value.
pub type R<'a, T> = nom::IResult<&'a [u8], T, ProtocolError>;

/// The frame being decoded, so that sub-slices become zero-copy [`Bytes`], and what is
/// left of the message's [`DecodeLimits`].
///
/// Every list a decoder allocates is charged here first ([`Cx::charge`]): its element
/// count against `max_entries` and its bytes (count times element size) against
/// `max_heap_bytes`. The budget covers the whole message, nested lists included, so a
/// request cannot spread a large total over many small lists.
///
/// It also keeps the frame bytes *pledged* to list elements that are allocated but not
/// decoded yet ([`Cx::admit`]): a list is allocated for its whole count before its first
/// element is read, and each of those elements will take at least its minimum size from
/// the bytes that follow. A nested list inside the first element may only claim what the
/// pending elements of the lists around it leave, so no byte of the frame pays for two
/// preallocated elements and the lists of a message never take more than the largest
/// element-size-to-wire-size ratio times the frame (plus the minimum sizes of the
/// elements being decoded, see [`crate::api::decode_memory_bound`]).
#[derive(Debug, Clone)]
pub struct Cx<'f> {
    frame: &'f Bytes,
    entries_left: Cell<usize>,
    heap_left: Cell<usize>,
    pledged: Cell<usize>,
}

impl<'f> Cx<'f> {
    /// A context over `frame` with the default limits; parsers must be given slices of
    /// this same frame.
    pub fn new(frame: &'f Bytes) -> Self {
        Self::with_limits(frame, &DecodeLimits::default())
    }

    /// A context over `frame` with `limits`.
    pub fn with_limits(frame: &'f Bytes, limits: &DecodeLimits) -> Self {
        Cx {
            frame,
            entries_left: Cell::new(limits.max_entries),
            heap_left: Cell::new(limits.max_heap_bytes),
            pledged: Cell::new(0),
        }
    }

    /// Bytes of the frame from the start of `i` to the frame's end (`i.len()` when `i`
    /// is not a slice of the frame).
    #[inline]
    fn frame_left(&self, i: &[u8]) -> usize {
        let base = self.frame.as_ptr() as usize;
        let end = base + self.frame.len();
        let at = i.as_ptr() as usize;
        if at >= base && at <= end {
            end - at
        } else {
            i.len()
        }
    }

    /// How many elements of at least `min_len` bytes the input `i` can still hold once
    /// the pledges of pending elements are set aside.
    #[inline]
    pub fn room(&self, i: &[u8], min_len: usize) -> usize {
        let free = self.frame_left(i).saturating_sub(self.pledged.get());
        i.len().min(free) / min_len.max(1)
    }

    /// Admits a list of `count` elements of at least `min_len` wire bytes and
    /// `elem_size` bytes in memory at the start of `i` (after its count): at most
    /// [`Cx::room`], within the budget; pledges `count * min_len` bytes, which
    /// [`Cx::release`] gives back one element at a time as each is decoded.
    #[inline]
    pub fn admit(
        &self,
        i: &[u8],
        count: usize,
        min_len: usize,
        elem_size: usize,
        field: &'static str,
    ) -> Res<()> {
        let max = self.room(i, min_len);
        if count > max {
            return Err(ProtocolError::ArrayTooLong {
                field,
                found: count as u64,
                remaining: i.len(),
                max,
            });
        }
        self.charge(count, elem_size, field)?;
        // count <= room, so count * min_len fits in the frame's length.
        self.pledged
            .set(self.pledged.get() + count * min_len.max(1));
        Ok(())
    }

    /// Pledges the two bytes each of `n` tagged fields takes at least (checked by the
    /// caller against [`Cx::room`]).
    #[inline]
    pub(crate) fn pledge_tags(&self, n: usize) {
        self.pledged.set(self.pledged.get() + 2 * n);
    }

    /// Gives back the pledge of one element that is about to be decoded.
    #[inline(always)]
    pub fn release(&self, min_len: usize) {
        self.pledged
            .set(self.pledged.get().saturating_sub(min_len.max(1)));
    }

    /// Takes `count` list entries of `elem_size` bytes each from the budget, before the
    /// list is allocated.
    #[inline]
    pub fn charge(&self, count: usize, elem_size: usize, field: &'static str) -> Res<()> {
        let entries = self.entries_left.get();
        if count > entries {
            return Err(over_limit(field, "max_entries", count));
        }
        let bytes = count.saturating_mul(elem_size);
        let heap = self.heap_left.get();
        if bytes > heap {
            return Err(over_limit(field, "max_heap_bytes", bytes));
        }
        self.entries_left.set(entries - count);
        self.heap_left.set(heap - bytes);
        Ok(())
    }

    /// `s` as a slice of the frame without copying. A slice from elsewhere is copied
    /// instead, so a misuse costs a copy, never a panic.
    #[inline]
    pub fn bytes(&self, s: &[u8]) -> Bytes {
        let base = self.frame.as_ptr() as usize;
        let start = s.as_ptr() as usize;
        match start.checked_sub(base) {
            Some(off) if off + s.len() <= self.frame.len() => self.frame.slice(off..off + s.len()),
            _ if s.is_empty() => Bytes::new(),
            _ => Bytes::copy_from_slice(s),
        }
    }
}

#[cold]
#[inline(never)]
fn over_limit(field: &'static str, limit: &'static str, requested: usize) -> ProtocolError {
    ProtocolError::DecodeLimitExceeded {
        field,
        limit,
        requested,
    }
}

/// Runs a cursor reader on `i` and returns the rest of the input with the value.
#[inline(always)]
pub(crate) fn run<'a, T>(i: &'a [u8], f: impl FnOnce(&mut &'a [u8]) -> Res<T>) -> R<'a, T> {
    let mut i = i;
    match f(&mut i) {
        Ok(v) => Ok((i, v)),
        Err(e) => Err(nom::Err::Error(e)),
    }
}

macro_rules! fixed {
    ($(#[$m:meta])* $name:ident, $t:ty) => {
        $(#[$m])*
        #[inline]
        pub fn $name<'a>(i: &'a [u8], field: &'static str) -> R<'a, $t> {
            run(i, |i| rd::$name(i, field))
        }
    };
}

fixed!(/// int8.
    i8, i8);
fixed!(/// int16, big-endian.
    i16, i16);
fixed!(/// int32, big-endian.
    i32, i32);
fixed!(/// int64, big-endian.
    i64, i64);
fixed!(/// uint16, big-endian.
    u16, u16);
fixed!(/// uint32, big-endian.
    u32, u32);
fixed!(/// float64, IEEE 754 big-endian.
    f64, f64);
fixed!(/// A boolean: any non-zero byte is true, as Kafka reads it.
    bool, bool);
fixed!(/// A 16-byte UUID.
    uuid, Uuid);
fixed!(/// An unsigned varint of at most 32 bits (lengths, counts, tags).
    uvarint, u32);
fixed!(/// An unsigned varint of at most 64 bits.
    uvarlong, u64);
fixed!(/// A zigzag-encoded signed varint (32 bits), as records use.
    varint, i32);
fixed!(/// A zigzag-encoded signed varlong (64 bits), as records use.
    varlong, i64);
fixed!(/// The count that opens a tagged-field section.
    tag_count, u32);

/// `n` raw bytes.
#[inline]
pub fn take<'a>(i: &'a [u8], n: usize, field: &'static str) -> R<'a, &'a [u8]> {
    run(i, |i| rd::take(i, n, field))
}

/// A non-null string.
#[inline]
pub fn string<'a>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    field: &'static str,
) -> R<'a, ByteString> {
    run(i, |i| rd::string(i, cx, compact, field))
}

/// A string that may be null when `nullable` is true for this version.
#[inline]
pub fn nullable_string<'a>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    field: &'static str,
) -> R<'a, Option<ByteString>> {
    run(i, |i| rd::nullable_string(i, cx, compact, nullable, field))
}

/// Non-null bytes, as a zero-copy slice of the frame.
#[inline]
pub fn bytes<'a>(i: &'a [u8], cx: &Cx<'_>, compact: bool, field: &'static str) -> R<'a, Bytes> {
    run(i, |i| rd::bytes(i, cx, compact, field))
}

/// Bytes that may be null when `nullable` is true for this version.
#[inline]
pub fn nullable_bytes<'a>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    field: &'static str,
) -> R<'a, Option<Bytes>> {
    run(i, |i| rd::nullable_bytes(i, cx, compact, nullable, field))
}

/// Adapts a `nom`-shaped element parser to a cursor reader.
fn cursor<'a, T>(
    mut elem: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> impl FnMut(&mut &'a [u8]) -> Res<T> {
    move |i| {
        let (rest, v) = elem(i)?;
        *i = rest;
        Ok(v)
    }
}

/// A non-null array whose elements each take at least `min_len` bytes.
#[inline]
pub fn array<'a, T>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    min_len: usize,
    field: &'static str,
    elem: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Vec<T>> {
    run(i, |i| {
        rd::array(i, cx, compact, min_len, field, cursor(elem))
    })
}

/// An array that may be null when `nullable` is true for this version.
///
/// The count is checked against what the remaining input can hold before anything is
/// allocated, so a forged count costs nothing.
pub fn nullable_array<'a, T>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    min_len: usize,
    field: &'static str,
    elem: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Option<Vec<T>>> {
    run(i, |i| {
        rd::nullable_array(i, cx, compact, nullable, min_len, field, cursor(elem))
    })
}

/// A nullable struct: one marker byte (negative = null), then the struct.
pub fn nullable_struct<'a, T>(
    i: &'a [u8],
    nullable: bool,
    field: &'static str,
    inner: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Option<T>> {
    run(i, |i| {
        rd::nullable_struct(i, nullable, field, cursor(inner))
    })
}

/// Tags must be strictly ascending within a section, as the protocol specifies (Kafka's
/// writer refuses anything else). Enforcing it keeps decode and encode inverse: the
/// encoder writes tags sorted, so a decoder that accepted any order could not round-trip.
#[inline]
pub fn tag_order(
    last: &mut Option<u32>,
    tag: u32,
    field: &'static str,
) -> Result<(), nom::Err<ProtocolError>> {
    rd::tag_order(last, tag, field).map_err(nom::Err::Error)
}

/// One tagged field: its tag and its raw data.
#[inline]
pub fn tagged_field<'a>(i: &'a [u8], field: &'static str) -> R<'a, (u32, &'a [u8])> {
    run(i, |i| rd::tagged_field(i, field))
}
