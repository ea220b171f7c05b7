//! Encoding primitives and the [`Encoder`].
//!
//! Small values go into one growing buffer. Byte payloads of at least
//! [`Encoder::ZERO_COPY_MIN`] bytes (record batches in a Fetch response, for instance)
//! are not copied: the encoder closes its current buffer and keeps a reference to the
//! payload, so the output is a list of [`Bytes`] segments for a vectored write.

use crate::error::ProtocolError;
use crate::types::{RawTaggedField, RecordSet, Uuid};
use bytes::{BufMut, Bytes, BytesMut};

/// Writes values into a list of byte segments.
#[derive(Debug, Default)]
pub struct Encoder {
    cur: BytesMut,
    done: Vec<Bytes>,
    done_len: usize,
}

impl Encoder {
    /// Payloads at least this long are referenced rather than copied.
    pub const ZERO_COPY_MIN: usize = 4096;

    /// An empty encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty encoder whose first buffer has room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Encoder {
            cur: BytesMut::with_capacity(n),
            done: Vec::new(),
            done_len: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.done_len + self.cur.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The output as segments, in order. Empty segments are never returned.
    pub fn into_segments(mut self) -> Vec<Bytes> {
        self.seal();
        self.done
    }

    /// The output as one contiguous buffer (copies when there are several segments).
    pub fn into_bytes(mut self) -> Bytes {
        if self.done.is_empty() {
            return self.cur.freeze();
        }
        self.seal();
        let mut out = BytesMut::with_capacity(self.done_len);
        for s in &self.done {
            out.extend_from_slice(s);
        }
        out.freeze()
    }

    fn seal(&mut self) {
        if !self.cur.is_empty() {
            let b = self.cur.split().freeze();
            self.done_len += b.len();
            self.done.push(b);
        }
    }

    /// Raw bytes, copied.
    #[inline]
    pub fn put_slice(&mut self, b: &[u8]) {
        self.cur.extend_from_slice(b);
    }

    /// A payload: referenced when large, copied when small.
    #[inline]
    pub fn put_payload(&mut self, b: &Bytes) {
        if b.len() >= Self::ZERO_COPY_MIN {
            self.seal();
            self.done_len += b.len();
            self.done.push(b.clone());
        } else {
            self.cur.extend_from_slice(b);
        }
    }

    /// int8.
    #[inline]
    pub fn put_i8(&mut self, v: i8) {
        self.cur.put_i8(v);
    }
    /// int16.
    #[inline]
    pub fn put_i16(&mut self, v: i16) {
        self.cur.put_i16(v);
    }
    /// int32.
    #[inline]
    pub fn put_i32(&mut self, v: i32) {
        self.cur.put_i32(v);
    }
    /// int64.
    #[inline]
    pub fn put_i64(&mut self, v: i64) {
        self.cur.put_i64(v);
    }
    /// uint16.
    #[inline]
    pub fn put_u16(&mut self, v: u16) {
        self.cur.put_u16(v);
    }
    /// uint32.
    #[inline]
    pub fn put_u32(&mut self, v: u32) {
        self.cur.put_u32(v);
    }
    /// float64.
    #[inline]
    pub fn put_f64(&mut self, v: f64) {
        self.cur.put_f64(v);
    }
    /// boolean as one byte.
    #[inline]
    pub fn put_bool(&mut self, v: bool) {
        self.cur.put_u8(u8::from(v));
    }
    /// UUID.
    #[inline]
    pub fn put_uuid(&mut self, v: &Uuid) {
        self.cur.extend_from_slice(v.as_bytes());
    }

    /// Unsigned varint.
    #[inline]
    pub fn put_uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.cur.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.cur.put_u8(v as u8);
    }

    /// Unsigned varlong.
    #[inline]
    pub fn put_uvarlong(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.cur.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.cur.put_u8(v as u8);
    }

    /// Zigzag varint.
    #[inline]
    pub fn put_varint(&mut self, v: i32) {
        self.put_uvarint(((v << 1) ^ (v >> 31)) as u32);
    }

    /// Zigzag varlong.
    #[inline]
    pub fn put_varlong(&mut self, v: i64) {
        self.put_uvarlong(((v << 1) ^ (v >> 63)) as u64);
    }

    #[inline]
    fn put_len(
        &mut self,
        len: Option<usize>,
        compact: bool,
        wide: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        let max = if wide {
            i32::MAX as usize
        } else {
            i16::MAX as usize
        };
        match len {
            Some(n) if n > max || (compact && n >= u32::MAX as usize) => {
                Err(ProtocolError::TooLong { field, len: n, max })
            }
            Some(n) if compact => {
                self.put_uvarint(n as u32 + 1);
                Ok(())
            }
            Some(n) if wide => {
                self.put_i32(n as i32);
                Ok(())
            }
            Some(n) => {
                self.put_i16(n as i16);
                Ok(())
            }
            None if compact => {
                self.put_uvarint(0);
                Ok(())
            }
            None if wide => {
                self.put_i32(-1);
                Ok(())
            }
            None => {
                self.put_i16(-1);
                Ok(())
            }
        }
    }

    /// A non-null string.
    #[inline]
    pub fn put_string(
        &mut self,
        s: &str,
        compact: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        self.put_len(Some(s.len()), compact, false, field)?;
        self.cur.extend_from_slice(s.as_bytes());
        Ok(())
    }

    /// A string that may be null where `nullable` allows it.
    #[inline]
    pub fn put_nullable_string(
        &mut self,
        s: Option<&str>,
        compact: bool,
        nullable: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        match s {
            Some(s) => self.put_string(s, compact, field),
            None if nullable => self.put_len(None, compact, false, field),
            None => Err(ProtocolError::UnexpectedNull { field }),
        }
    }

    /// Non-null bytes.
    #[inline]
    pub fn put_bytes(
        &mut self,
        b: &Bytes,
        compact: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        self.put_len(Some(b.len()), compact, true, field)?;
        self.put_payload(b);
        Ok(())
    }

    /// Bytes that may be null where `nullable` allows it.
    #[inline]
    pub fn put_nullable_bytes(
        &mut self,
        b: Option<&Bytes>,
        compact: bool,
        nullable: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        match b {
            Some(b) => self.put_bytes(b, compact, field),
            None if nullable => self.put_len(None, compact, true, field),
            None => Err(ProtocolError::UnexpectedNull { field }),
        }
    }

    /// A response's record batches: one length for all segments, then each segment
    /// (referenced or copied as [`Self::put_payload`] decides).
    pub fn put_record_set(
        &mut self,
        r: &RecordSet,
        compact: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        self.put_len(Some(r.len()), compact, true, field)?;
        for s in r.segments() {
            self.put_payload(s);
        }
        Ok(())
    }

    /// Record batches that may be null where `nullable` allows it.
    pub fn put_nullable_record_set(
        &mut self,
        r: Option<&RecordSet>,
        compact: bool,
        nullable: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        match r {
            Some(r) => self.put_record_set(r, compact, field),
            None if nullable => self.put_len(None, compact, true, field),
            None => Err(ProtocolError::UnexpectedNull { field }),
        }
    }

    /// An array's element count.
    #[inline]
    pub fn put_array_len(
        &mut self,
        n: usize,
        compact: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        self.put_len(Some(n), compact, true, field)
    }

    /// A null array, where `nullable` allows it.
    #[inline]
    pub fn put_null_array(
        &mut self,
        compact: bool,
        nullable: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        if !nullable {
            return Err(ProtocolError::UnexpectedNull { field });
        }
        self.put_len(None, compact, true, field)
    }

    /// A null struct marker, where `nullable` allows it.
    #[inline]
    pub fn put_null_struct(
        &mut self,
        nullable: bool,
        field: &'static str,
    ) -> Result<(), ProtocolError> {
        if !nullable {
            return Err(ProtocolError::UnexpectedNull { field });
        }
        self.put_i8(-1);
        Ok(())
    }
}

/// Collects the known tagged fields of a struct, then writes them together with the
/// unknown ones in ascending tag order, as the protocol requires.
#[derive(Debug, Default)]
pub struct TaggedWriter {
    fields: Vec<(u32, Encoder)>,
}

impl TaggedWriter {
    /// An empty section.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the field `tag` and returns the encoder for its value.
    pub fn begin(&mut self, tag: u32) -> &mut Encoder {
        self.fields.push((tag, Encoder::new()));
        let last = self.fields.len() - 1;
        &mut self.fields[last].1
    }

    /// Writes the section: count, then each field as tag, size, data.
    pub fn finish(self, e: &mut Encoder, unknown: &[RawTaggedField]) -> Result<(), ProtocolError> {
        let mut all: Vec<(u32, Bytes)> = self
            .fields
            .into_iter()
            .map(|(t, enc)| (t, enc.into_bytes()))
            .collect();
        all.extend(unknown.iter().map(|f| (f.tag, f.data.clone())));
        all.sort_by_key(|(t, _)| *t);
        let count = u32::try_from(all.len()).map_err(|_| ProtocolError::TooLong {
            field: "tagged fields",
            len: all.len(),
            max: u32::MAX as usize,
        })?;
        e.put_uvarint(count);
        for (tag, data) in all {
            let size = u32::try_from(data.len()).map_err(|_| ProtocolError::TooLong {
                field: "tagged field",
                len: data.len(),
                max: u32::MAX as usize,
            })?;
            e.put_uvarint(tag);
            e.put_uvarint(size);
            e.put_payload(&data);
        }
        Ok(())
    }
}
