//! Decoding primitives over a cursor: each reader takes `&mut &[u8]`, advances it past what
//! it read and returns the value or a [`ProtocolError`].
//!
//! This is what generated messages decode with. Compared with returning the rest of the
//! input next to every value (the `nom` shape of [`super::de`]), a cursor keeps the results
//! small: primitives stay in registers, and a decoded struct is written once instead of
//! being moved out through every layer in a `(rest, value)` tuple. Error constructors are
//! out of line and marked cold so the success paths stay short.
//!
//! The wire layouts and the checks are those of [`super::de`], which wraps these readers:
//! lengths are checked against the bytes left before anything is sliced, array counts
//! against the bytes left (less what earlier lists pledged, see [`Cx`]) divided by the
//! element's minimum size at the message's version before anything is allocated, and
//! strings are validated as UTF-8.

use super::de::Cx;
use crate::error::ProtocolError;
use crate::types::Uuid;
use bytes::Bytes;
use bytestring::ByteString;

/// Result of a cursor reader.
pub type Res<T> = Result<T, ProtocolError>;

#[cold]
#[inline(never)]
fn truncated(field: &'static str, needed: usize, i: &[u8]) -> ProtocolError {
    ProtocolError::Truncated {
        field,
        needed: needed.saturating_sub(i.len()),
        remaining: i.len(),
    }
}

#[cold]
#[inline(never)]
fn invalid_length(field: &'static str, found: i64, max: usize) -> ProtocolError {
    ProtocolError::InvalidLength { field, found, max }
}

#[cold]
#[inline(never)]
fn invalid_varint(field: &'static str) -> ProtocolError {
    ProtocolError::InvalidVarint { field }
}

#[cold]
#[inline(never)]
fn unexpected_null(field: &'static str) -> ProtocolError {
    ProtocolError::UnexpectedNull { field }
}

#[cold]
#[inline(never)]
fn invalid_utf8(field: &'static str) -> ProtocolError {
    ProtocolError::InvalidUtf8 { field }
}

#[cold]
#[inline(never)]
fn too_many(field: &'static str, found: u64, remaining: usize, max: usize) -> ProtocolError {
    ProtocolError::ArrayTooLong {
        field,
        found,
        remaining,
        max,
    }
}

/// Stores `new` in `slot`, which must hold a default value, without dropping it.
///
/// Generated decoders fill structs in place, so every string, byte or array field is
/// overwritten once over its default; the defaults own no memory (empty vectors, static or
/// empty bytes), and skipping their drop saves an out-of-line drop call per field. A slot
/// holding anything else would only leak, never be unsound.
#[inline(always)]
pub(crate) fn set<T>(slot: &mut T, new: T) {
    std::mem::forget(std::mem::replace(slot, new));
}

/// `N` bytes as an array.
#[inline(always)]
fn chunk<const N: usize>(i: &mut &[u8], field: &'static str) -> Res<[u8; N]> {
    match i.split_first_chunk::<N>() {
        Some((b, rest)) => {
            *i = rest;
            Ok(*b)
        }
        None => Err(truncated(field, N, i)),
    }
}

macro_rules! fixed {
    ($(#[$m:meta])* $name:ident, $t:ty) => {
        $(#[$m])*
        #[inline(always)]
        pub fn $name(i: &mut &[u8], field: &'static str) -> Res<$t> {
            chunk(i, field).map(<$t>::from_be_bytes)
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

/// A boolean: any non-zero byte is true, as Kafka reads it.
#[inline(always)]
pub fn bool(i: &mut &[u8], field: &'static str) -> Res<bool> {
    chunk::<1>(i, field).map(|[b]| b != 0)
}

/// A 16-byte UUID.
#[inline(always)]
pub fn uuid(i: &mut &[u8], field: &'static str) -> Res<Uuid> {
    chunk::<16>(i, field).map(Uuid::from_bytes)
}

/// `n` raw bytes.
#[inline]
pub fn take<'a>(i: &mut &'a [u8], n: usize, field: &'static str) -> Res<&'a [u8]> {
    match i.split_at_checked(n) {
        Some((head, rest)) => {
            *i = rest;
            Ok(head)
        }
        None => Err(truncated(field, n, i)),
    }
}

/// The multi-byte tail of [`uvarint`], out of line: lengths and counts under 128, the
/// common case, are one byte.
#[inline(never)]
fn uvarint_slow(i: &mut &[u8], field: &'static str) -> Res<u32> {
    let mut value: u32 = 0;
    for (n, &b) in i.iter().enumerate().take(5) {
        if n == 4 && b > 0x0f {
            return Err(invalid_varint(field));
        }
        value |= u32::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            *i = &i[n + 1..];
            return Ok(value);
        }
    }
    if i.len() < 5 {
        Err(truncated(field, i.len() + 1, i))
    } else {
        Err(invalid_varint(field))
    }
}

/// An unsigned varint of at most 32 bits (lengths, counts, tags).
#[inline(always)]
pub fn uvarint(i: &mut &[u8], field: &'static str) -> Res<u32> {
    match i.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *i = rest;
            Ok(u32::from(b))
        }
        _ => uvarint_slow(i, field),
    }
}

/// An unsigned varint of at most 64 bits.
#[inline]
pub fn uvarlong(i: &mut &[u8], field: &'static str) -> Res<u64> {
    let mut value: u64 = 0;
    for (n, &b) in i.iter().enumerate().take(10) {
        if n == 9 && b > 0x01 {
            return Err(invalid_varint(field));
        }
        value |= u64::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            *i = &i[n + 1..];
            return Ok(value);
        }
    }
    if i.len() < 10 {
        Err(truncated(field, i.len() + 1, i))
    } else {
        Err(invalid_varint(field))
    }
}

/// A zigzag-encoded signed varint (32 bits), as records use.
#[inline]
pub fn varint(i: &mut &[u8], field: &'static str) -> Res<i32> {
    let u = uvarint(i, field)?;
    Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
}

/// A zigzag-encoded signed varlong (64 bits), as records use.
#[inline]
pub fn varlong(i: &mut &[u8], field: &'static str) -> Res<i64> {
    let u = uvarlong(i, field)?;
    Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
}

/// Reads a length prefix: `Ok(None)` is null.
#[inline(always)]
fn length(i: &mut &[u8], compact: bool, wide: bool, field: &'static str) -> Res<Option<usize>> {
    if compact {
        let n = uvarint(i, field)?;
        return Ok(n.checked_sub(1).map(|n| n as usize));
    }
    let n = if wide {
        i32(i, field)?
    } else {
        i32::from(i16(i, field)?)
    };
    match n {
        -1 => Ok(None),
        n if n < -1 => Err(invalid_length(field, i64::from(n), i.len())),
        n => Ok(Some(n as usize)),
    }
}

/// `len` bytes announced by a length prefix.
#[inline(always)]
fn sized<'a>(i: &mut &'a [u8], len: usize, field: &'static str) -> Res<&'a [u8]> {
    match i.split_at_checked(len) {
        Some((head, rest)) => {
            *i = rest;
            Ok(head)
        }
        None => Err(invalid_length(field, len as i64, i.len())),
    }
}

#[inline(always)]
fn null_check<T>(v: Option<T>, nullable: bool, field: &'static str) -> Res<Option<T>> {
    if v.is_none() && !nullable {
        return Err(unexpected_null(field));
    }
    Ok(v)
}

/// A non-null string.
#[inline(always)]
pub fn string(i: &mut &[u8], cx: &Cx<'_>, compact: bool, field: &'static str) -> Res<ByteString> {
    Ok(nullable_string(i, cx, compact, false, field)?.unwrap_or_default())
}

/// A string that may be null when `nullable` is true for this version.
#[inline(always)]
pub fn nullable_string(
    i: &mut &[u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    field: &'static str,
) -> Res<Option<ByteString>> {
    let Some(len) = null_check(length(i, compact, false, field)?, nullable, field)? else {
        return Ok(None);
    };
    // Compact lengths can say more, but strings are int16-bounded in every version,
    // as Kafka's reader enforces; the encoder would refuse to write them back.
    if len > i16::MAX as usize {
        return Err(invalid_length(field, len as i64, i16::MAX as usize));
    }
    let raw = sized(i, len, field)?;
    if raw.is_empty() {
        return Ok(Some(ByteString::new()));
    }
    ByteString::try_from(cx.bytes(raw))
        .map(Some)
        .map_err(|_| invalid_utf8(field))
}

/// Non-null bytes, as a zero-copy slice of the frame.
#[inline(always)]
pub fn bytes(i: &mut &[u8], cx: &Cx<'_>, compact: bool, field: &'static str) -> Res<Bytes> {
    Ok(nullable_bytes(i, cx, compact, false, field)?.unwrap_or_default())
}

/// Bytes that may be null when `nullable` is true for this version.
#[inline(always)]
pub fn nullable_bytes(
    i: &mut &[u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    field: &'static str,
) -> Res<Option<Bytes>> {
    let Some(len) = null_check(length(i, compact, true, field)?, nullable, field)? else {
        return Ok(None);
    };
    let raw = sized(i, len, field)?;
    Ok(Some(cx.bytes(raw)))
}

/// Reads an array's count (`None` for null) and admits it: at most what the remaining
/// input holds at `min_len` bytes per element, and within the message's budget.
#[inline(always)]
fn array_count<T>(
    i: &mut &[u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    min_len: usize,
    field: &'static str,
) -> Res<Option<usize>> {
    let Some(count) = null_check(length(i, compact, true, field)?, nullable, field)? else {
        return Ok(None);
    };
    cx.admit(i, count, min_len, std::mem::size_of::<T>(), field)?;
    Ok(Some(count))
}

/// Room for the unknown tagged fields of a section, reserved once when the first one is
/// met: `left` is how many fields of the section remain, this one included (each takes
/// at least two bytes, pledged by [`tag_section`]), so the vector never grows past that.
#[inline]
pub fn reserve_tagged(
    out: &mut Vec<crate::types::RawTaggedField>,
    cx: &Cx<'_>,
    left: u32,
    field: &'static str,
) -> Res<()> {
    if out.capacity() == 0 {
        let left = left as usize;
        cx.charge(
            left,
            std::mem::size_of::<crate::types::RawTaggedField>(),
            field,
        )?;
        out.reserve_exact(left);
    }
    Ok(())
}

/// A non-null array whose elements each take at least `min_len` bytes.
#[inline]
pub fn array<'a, T>(
    i: &mut &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    min_len: usize,
    field: &'static str,
    elem: impl FnMut(&mut &'a [u8]) -> Res<T>,
) -> Res<Vec<T>> {
    Ok(nullable_array(i, cx, compact, false, min_len, field, elem)?.unwrap_or_default())
}

/// An array that may be null when `nullable` is true for this version.
///
/// The count is admitted by [`Cx::admit`] before anything is allocated: at most what the
/// remaining input, less the bytes pledged to pending elements, holds at `min_len` bytes
/// per element (the exact minimum at the message's version), and within the message's
/// budget. So a forged count costs nothing.
#[inline]
pub fn nullable_array<'a, T>(
    i: &mut &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    min_len: usize,
    field: &'static str,
    mut elem: impl FnMut(&mut &'a [u8]) -> Res<T>,
) -> Res<Option<Vec<T>>> {
    let Some(count) = array_count::<T>(i, cx, compact, nullable, min_len, field)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        cx.release(min_len);
        out.push(elem(i)?);
    }
    Ok(Some(out))
}

/// A non-null array of structs, each decoded in place by `elem` into a default value.
#[inline]
pub fn struct_array<'a, T: Default>(
    i: &mut &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    min_len: usize,
    field: &'static str,
    elem: impl FnMut(&mut T, &mut &'a [u8]) -> Res<()>,
) -> Res<Vec<T>> {
    Ok(nullable_struct_array(i, cx, compact, false, min_len, field, elem)?.unwrap_or_default())
}

/// [`nullable_array`] for structs: the vector is filled with default values, which `elem`
/// then decodes in place, so elements are not moved after decoding.
#[inline]
pub fn nullable_struct_array<'a, T: Default>(
    i: &mut &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    nullable: bool,
    min_len: usize,
    field: &'static str,
    mut elem: impl FnMut(&mut T, &mut &'a [u8]) -> Res<()>,
) -> Res<Option<Vec<T>>> {
    let Some(count) = array_count::<T>(i, cx, compact, nullable, min_len, field)? else {
        return Ok(None);
    };
    let mut out: Vec<T> = (0..count).map(|_| T::default()).collect();
    for e in &mut out {
        cx.release(min_len);
        elem(e, i)?;
    }
    Ok(Some(out))
}

/// A nullable struct: one marker byte (negative = null), then the struct.
#[inline]
pub fn nullable_struct<'a, T>(
    i: &mut &'a [u8],
    nullable: bool,
    field: &'static str,
    inner: impl FnOnce(&mut &'a [u8]) -> Res<T>,
) -> Res<Option<T>> {
    if i8(i, field)? < 0 {
        null_check::<T>(None, nullable, field)?;
        return Ok(None);
    }
    inner(i).map(Some)
}

/// The count that opens a tagged-field section.
#[inline(always)]
pub fn tag_count(i: &mut &[u8], field: &'static str) -> Res<u32> {
    let n = uvarint(i, field)?;
    // Each tagged field takes at least two bytes (tag and size).
    if n as usize > i.len() / 2 {
        return Err(too_many(field, u64::from(n), i.len(), i.len() / 2));
    }
    Ok(n)
}

/// The count that opens a tagged-field section of a message being decoded with `cx`:
/// each field takes at least two bytes (tag and size), pledged as for list elements
/// ([`Cx::admit`]) and given back by [`next_tagged_field`].
#[inline(always)]
pub fn tag_section(i: &mut &[u8], cx: &Cx<'_>, field: &'static str) -> Res<u32> {
    let n = uvarint(i, field)?;
    if n == 0 {
        return Ok(0);
    }
    let max = cx.room(i, 2);
    if n as usize > max {
        return Err(too_many(field, u64::from(n), i.len(), max));
    }
    cx.pledge_tags(n as usize);
    Ok(n)
}

/// One tagged field of a section opened by [`tag_section`].
#[inline]
pub fn next_tagged_field<'a>(
    i: &mut &'a [u8],
    cx: &Cx<'_>,
    field: &'static str,
) -> Res<(u32, &'a [u8])> {
    cx.release(2);
    tagged_field(i, field)
}

/// Tags must be strictly ascending within a section, as the protocol specifies (Kafka's
/// writer refuses anything else). Enforcing it keeps decode and encode inverse: the
/// encoder writes tags sorted, so a decoder that accepted any order could not round-trip.
#[inline]
pub fn tag_order(last: &mut Option<u32>, tag: u32, field: &'static str) -> Res<()> {
    if let Some(prev) = *last
        && tag <= prev
    {
        return Err(ProtocolError::InvalidValue {
            field,
            expected: "tags in strictly ascending order",
            found: i64::from(tag),
        });
    }
    *last = Some(tag);
    Ok(())
}

/// One tagged field: its tag and its raw data.
#[inline]
pub fn tagged_field<'a>(i: &mut &'a [u8], field: &'static str) -> Res<(u32, &'a [u8])> {
    let tag = uvarint(i, field)?;
    let size = uvarint(i, field)?;
    let data = sized(i, size as usize, field)?;
    Ok((tag, data))
}
