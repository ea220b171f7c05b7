//! Small value types shared by all messages.

use bytes::Bytes;
use std::fmt;

/// A 128-bit UUID as Kafka sends it (topic ids, directory ids). All zeros means "none".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid([u8; 16]);

impl Uuid {
    /// The all-zero UUID Kafka uses for "no id".
    pub const ZERO: Uuid = Uuid([0; 16]);

    /// From raw bytes.
    pub const fn from_bytes(b: [u8; 16]) -> Self {
        Uuid(b)
    }

    /// From a 128-bit integer (big-endian byte order).
    pub const fn from_u128(v: u128) -> Self {
        Uuid(v.to_be_bytes())
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// As a 128-bit integer.
    pub const fn as_u128(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }

    /// Whether this is the all-zero UUID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A tagged field this crate does not know, preserved so it can be re-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    /// The tag number.
    pub tag: u32,
    /// The field's bytes, as a slice of the frame.
    pub data: Bytes,
}

/// An inclusive range of API versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionRange {
    /// Lowest version.
    pub min: i16,
    /// Highest version.
    pub max: i16,
}

impl VersionRange {
    /// `min..=max`.
    pub const fn new(min: i16, max: i16) -> Self {
        VersionRange { min, max }
    }

    /// Whether `v` is in the range.
    pub const fn contains(&self, v: i16) -> bool {
        v >= self.min && v <= self.max
    }
}

/// The record batches of a response's `records` field (Fetch): byte segments written
/// back to back as one value, so batches kept apart (each stored or encoded on its own)
/// go out with a vectored write instead of being joined into one buffer first. A
/// decoded value is one segment. Equality compares the bytes, not how they are split.
#[derive(Clone, Default)]
pub struct RecordSet {
    segments: Vec<Bytes>,
    len: usize,
}

impl RecordSet {
    /// No bytes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a segment (empty ones are not kept).
    pub fn push(&mut self, segment: Bytes) {
        if !segment.is_empty() {
            self.len += segment.len();
            self.segments.push(segment);
        }
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segments, in order; none is empty.
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// The bytes as one buffer: shared when there is one segment, copied otherwise.
    pub fn to_bytes(&self) -> Bytes {
        match self.segments.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = Vec::with_capacity(self.len);
                for s in many {
                    out.extend_from_slice(s);
                }
                Bytes::from(out)
            }
        }
    }

    /// The bytes in order, segment by segment.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        self.segments.iter().flat_map(|s| s.iter().copied())
    }
}

impl From<Bytes> for RecordSet {
    fn from(b: Bytes) -> Self {
        let mut out = RecordSet::new();
        out.push(b);
        out
    }
}

impl FromIterator<Bytes> for RecordSet {
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        let mut out = RecordSet::new();
        for b in iter {
            out.push(b);
        }
        out
    }
}

impl PartialEq for RecordSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for RecordSet {}

impl fmt::Debug for RecordSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordSet")
            .field("len", &self.len)
            .field("segments", &self.segments.len())
            .finish()
    }
}
