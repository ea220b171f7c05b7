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
