//! Decoding primitives, as `nom` parsers over a whole frame.
//!
//! Each parser takes the remaining input and a `field` path used in errors. Byte strings
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

use crate::error::ProtocolError;
use crate::types::Uuid;
use bytes::Bytes;
use bytestring::ByteString;
use nom::number::complete as num;

/// Result of a parser: the rest of the input and the value.
pub type R<'a, T> = nom::IResult<&'a [u8], T, ProtocolError>;

/// The frame being decoded, so that sub-slices become zero-copy [`Bytes`].
#[derive(Debug, Clone, Copy)]
pub struct Cx<'f> {
    frame: &'f Bytes,
}

impl<'f> Cx<'f> {
    /// A context over `frame`; parsers must be given slices of this same frame.
    pub fn new(frame: &'f Bytes) -> Self {
        Cx { frame }
    }

    /// `s` as a slice of the frame without copying. A slice from elsewhere is copied
    /// instead, so a misuse costs a copy, never a panic.
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

#[inline]
fn err<T>(e: ProtocolError) -> Result<T, nom::Err<ProtocolError>> {
    Err(nom::Err::Error(e))
}

#[inline]
fn truncated(field: &'static str, needed: usize, i: &[u8]) -> nom::Err<ProtocolError> {
    nom::Err::Error(ProtocolError::Truncated {
        field,
        needed: needed.saturating_sub(i.len()),
        remaining: i.len(),
    })
}

macro_rules! fixed {
    ($(#[$m:meta])* $name:ident, $t:ty, $parser:ident, $n:expr) => {
        $(#[$m])*
        #[inline]
        pub fn $name<'a>(i: &'a [u8], field: &'static str) -> R<'a, $t> {
            num::$parser::<&[u8], ProtocolError>(i).map_err(|_| truncated(field, $n, i))
        }
    };
}

fixed!(/// int8.
    i8, i8, be_i8, 1);
fixed!(/// int16, big-endian.
    i16, i16, be_i16, 2);
fixed!(/// int32, big-endian.
    i32, i32, be_i32, 4);
fixed!(/// int64, big-endian.
    i64, i64, be_i64, 8);
fixed!(/// uint16, big-endian.
    u16, u16, be_u16, 2);
fixed!(/// uint32, big-endian.
    u32, u32, be_u32, 4);
fixed!(/// float64, IEEE 754 big-endian.
    f64, f64, be_f64, 8);

/// A boolean: any non-zero byte is true, as Kafka reads it.
#[inline]
pub fn bool<'a>(i: &'a [u8], field: &'static str) -> R<'a, bool> {
    let (i, b) = num::be_u8::<&[u8], ProtocolError>(i).map_err(|_| truncated(field, 1, i))?;
    Ok((i, b != 0))
}

/// A 16-byte UUID.
#[inline]
pub fn uuid<'a>(i: &'a [u8], field: &'static str) -> R<'a, Uuid> {
    let (rest, raw) = take(i, 16, field)?;
    let mut b = [0u8; 16];
    b.copy_from_slice(raw);
    Ok((rest, Uuid::from_bytes(b)))
}

/// `n` raw bytes.
#[inline]
pub fn take<'a>(i: &'a [u8], n: usize, field: &'static str) -> R<'a, &'a [u8]> {
    nom::bytes::complete::take::<usize, &[u8], ProtocolError>(n)(i)
        .map_err(|_| truncated(field, n, i))
}

/// An unsigned varint of at most 32 bits (lengths, counts, tags).
#[inline]
pub fn uvarint<'a>(i: &'a [u8], field: &'static str) -> R<'a, u32> {
    let mut value: u32 = 0;
    for (n, &b) in i.iter().enumerate().take(5) {
        if n == 4 && b > 0x0f {
            return err(ProtocolError::InvalidVarint { field });
        }
        value |= u32::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            return Ok((&i[n + 1..], value));
        }
    }
    if i.len() < 5 {
        Err(truncated(field, i.len() + 1, i))
    } else {
        err(ProtocolError::InvalidVarint { field })
    }
}

/// An unsigned varint of at most 64 bits.
#[inline]
pub fn uvarlong<'a>(i: &'a [u8], field: &'static str) -> R<'a, u64> {
    let mut value: u64 = 0;
    for (n, &b) in i.iter().enumerate().take(10) {
        if n == 9 && b > 0x01 {
            return err(ProtocolError::InvalidVarint { field });
        }
        value |= u64::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            return Ok((&i[n + 1..], value));
        }
    }
    if i.len() < 10 {
        Err(truncated(field, i.len() + 1, i))
    } else {
        err(ProtocolError::InvalidVarint { field })
    }
}

/// A zigzag-encoded signed varint (32 bits), as records use.
#[inline]
pub fn varint<'a>(i: &'a [u8], field: &'static str) -> R<'a, i32> {
    let (i, u) = uvarint(i, field)?;
    Ok((i, ((u >> 1) as i32) ^ -((u & 1) as i32)))
}

/// A zigzag-encoded signed varlong (64 bits), as records use.
#[inline]
pub fn varlong<'a>(i: &'a [u8], field: &'static str) -> R<'a, i64> {
    let (i, u) = uvarlong(i, field)?;
    Ok((i, ((u >> 1) as i64) ^ -((u & 1) as i64)))
}

/// Reads a length prefix: `Ok(None)` is null.
#[inline]
fn length<'a>(i: &'a [u8], compact: bool, wide: bool, field: &'static str) -> R<'a, Option<usize>> {
    if compact {
        let (rest, n) = uvarint(i, field)?;
        Ok((rest, n.checked_sub(1).map(|n| n as usize)))
    } else {
        let (rest, n) = if wide {
            i32(i, field)?
        } else {
            let (rest, n) = i16(i, field)?;
            (rest, i32::from(n))
        };
        match n {
            -1 => Ok((rest, None)),
            n if n < -1 => err(ProtocolError::InvalidLength {
                field,
                found: i64::from(n),
                max: rest.len(),
            }),
            n => Ok((rest, Some(n as usize))),
        }
    }
}

#[inline]
fn sized<'a>(i: &'a [u8], len: usize, field: &'static str) -> R<'a, &'a [u8]> {
    if len > i.len() {
        return err(ProtocolError::InvalidLength {
            field,
            found: len as i64,
            max: i.len(),
        });
    }
    Ok((&i[len..], &i[..len]))
}

#[inline]
fn null_check<T>(
    v: Option<T>,
    nullable: bool,
    field: &'static str,
) -> Result<Option<T>, nom::Err<ProtocolError>> {
    if v.is_none() && !nullable {
        return err(ProtocolError::UnexpectedNull { field });
    }
    Ok(v)
}

fn to_string(
    cx: &Cx<'_>,
    raw: &[u8],
    field: &'static str,
) -> Result<ByteString, nom::Err<ProtocolError>> {
    ByteString::try_from(cx.bytes(raw))
        .map_err(|_| nom::Err::Error(ProtocolError::InvalidUtf8 { field }))
}

/// A non-null string.
#[inline]
pub fn string<'a>(
    i: &'a [u8],
    cx: &Cx<'_>,
    compact: bool,
    field: &'static str,
) -> R<'a, ByteString> {
    let (i, s) = nullable_string(i, cx, compact, false, field)?;
    Ok((i, s.unwrap_or_default()))
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
    let (i, len) = length(i, compact, false, field)?;
    match null_check(len, nullable, field)? {
        None => Ok((i, None)),
        // Compact lengths can say more, but strings are int16-bounded in every version,
        // as Kafka's reader enforces; the encoder would refuse to write them back.
        Some(len) if len > i16::MAX as usize => err(ProtocolError::InvalidLength {
            field,
            found: len as i64,
            max: i16::MAX as usize,
        }),
        Some(len) => {
            let (i, raw) = sized(i, len, field)?;
            Ok((i, Some(to_string(cx, raw, field)?)))
        }
    }
}

/// Non-null bytes, as a zero-copy slice of the frame.
#[inline]
pub fn bytes<'a>(i: &'a [u8], cx: &Cx<'_>, compact: bool, field: &'static str) -> R<'a, Bytes> {
    let (i, b) = nullable_bytes(i, cx, compact, false, field)?;
    Ok((i, b.unwrap_or_default()))
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
    let (i, len) = length(i, compact, true, field)?;
    match null_check(len, nullable, field)? {
        None => Ok((i, None)),
        Some(len) => {
            let (i, raw) = sized(i, len, field)?;
            Ok((i, Some(cx.bytes(raw))))
        }
    }
}

/// A non-null array whose elements each take at least `min_len` bytes.
#[inline]
pub fn array<'a, T>(
    i: &'a [u8],
    compact: bool,
    min_len: usize,
    field: &'static str,
    elem: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Vec<T>> {
    let (i, v) = nullable_array(i, compact, false, min_len, field, elem)?;
    Ok((i, v.unwrap_or_default()))
}

/// An array that may be null when `nullable` is true for this version.
///
/// The count is checked against what the remaining input can hold before anything is
/// allocated, so a forged count costs nothing.
pub fn nullable_array<'a, T>(
    i: &'a [u8],
    compact: bool,
    nullable: bool,
    min_len: usize,
    field: &'static str,
    mut elem: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Option<Vec<T>>> {
    let (mut i, count) = length(i, compact, true, field)?;
    let Some(count) = null_check(count, nullable, field)? else {
        return Ok((i, None));
    };
    let max = i.len() / min_len.max(1);
    if count > max {
        return err(ProtocolError::ArrayTooLong {
            field,
            found: count as u64,
            remaining: i.len(),
            max,
        });
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let (rest, v) = elem(i)?;
        i = rest;
        out.push(v);
    }
    Ok((i, Some(out)))
}

/// A nullable struct: one marker byte (negative = null), then the struct.
pub fn nullable_struct<'a, T>(
    i: &'a [u8],
    nullable: bool,
    field: &'static str,
    mut inner: impl FnMut(&'a [u8]) -> R<'a, T>,
) -> R<'a, Option<T>> {
    let (i, marker) = i8(i, field)?;
    if marker < 0 {
        null_check::<T>(None, nullable, field)?;
        return Ok((i, None));
    }
    let (i, v) = inner(i)?;
    Ok((i, Some(v)))
}

/// The count that opens a tagged-field section.
#[inline]
pub fn tag_count<'a>(i: &'a [u8], field: &'static str) -> R<'a, u32> {
    let (rest, n) = uvarint(i, field)?;
    // Each tagged field takes at least two bytes (tag and size).
    if n as usize > rest.len() / 2 {
        return err(ProtocolError::ArrayTooLong {
            field,
            found: u64::from(n),
            remaining: rest.len(),
            max: rest.len() / 2,
        });
    }
    Ok((rest, n))
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
    if let Some(prev) = *last
        && tag <= prev
    {
        return err(ProtocolError::InvalidValue {
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
pub fn tagged_field<'a>(i: &'a [u8], field: &'static str) -> R<'a, (u32, &'a [u8])> {
    let (i, tag) = uvarint(i, field)?;
    let (i, size) = uvarint(i, field)?;
    let (i, data) = sized(i, size as usize, field)?;
    Ok((i, (tag, data)))
}
