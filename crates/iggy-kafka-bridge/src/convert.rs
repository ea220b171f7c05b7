//! Offsets, counts and times between Kafka's signed integers and Iggy's unsigned ones
//! (partition numbers are [`crate::partition`]'s).
//!
//! Iggy's `u64` offsets, message counts and milliseconds reach Kafka's `i64` through
//! [`kafka_i64`]: a partition would need 2^63 messages to go past `i64::MAX` (and
//! microseconds divided by 1000 never do), so it saturates there rather than wrap
//! negative. A Kafka offset goes to Iggy only once it is known not to be negative: a
//! client's offset after the check against the watermarks, which fails as
//! `OffsetOutOfRange` where it is made, and watermarks, which the bridge makes
//! non-negative ([`iggy_offset`]).

use kafka_store::{StoreError, StoreResult};

/// An Iggy offset, message count or time as Kafka's `i64`, saturating at `i64::MAX`.
pub(crate) fn kafka_i64(offset: u64) -> i64 {
    i64::try_from(offset).unwrap_or(i64::MAX)
}

/// A number of messages in memory as a Kafka offset delta (a `Vec` holds fewer than
/// `i64::MAX`, so this is exact).
pub(crate) fn kafka_count(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A watermark the bridge computed, as an Iggy offset. A negative one is the bridge's
/// bug, reported as such rather than read as offset 0.
pub(crate) fn iggy_offset(offset: i64) -> StoreResult<u64> {
    u64::try_from(offset).map_err(|_| StoreError::Internal(format!("negative watermark {offset}")))
}

/// How many messages to ask Iggy for, from a wider count: past `u32::MAX`, that many.
pub(crate) fn poll_count<T: TryInto<u32>>(count: T) -> u32 {
    count.try_into().unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_cross_without_wrapping() {
        assert_eq!(kafka_i64(0), 0);
        assert_eq!(kafka_i64(41), 41);
        assert_eq!(kafka_i64(u64::MAX), i64::MAX);
        assert_eq!(kafka_i64(u64::MAX / 1000), 18_446_744_073_709_551);
        assert_eq!(kafka_count(3), 3);
        assert_eq!(iggy_offset(7).unwrap(), 7);
        assert!(matches!(iggy_offset(-1), Err(StoreError::Internal(_))));
        assert_eq!(poll_count(5usize), 5);
        assert_eq!(poll_count(u64::MAX), u32::MAX);
    }
}
