//! Partition numbers between Kafka and Iggy.
//!
//! Kafka numbers a topic's partitions with `i32` from 0, Iggy with `u32` partition ids
//! from 0, and Kafka partition `n` is Iggy partition `n`. [`PartitionId`] is a number
//! valid in both (0 to `i32::MAX`), so going either way from it cannot fail; the one
//! conversion that can, from what a client sent, is checked where the request comes
//! in and fails as the Kafka error for that topic and partition.
//!
//! Partition counts cross the same line: a count a client asks for must be at least 1,
//! and a count Iggy reports must fit Kafka's `i32`.

use kafka_store::{StoreError, StoreResult};

/// A partition of a topic, the same number in Kafka and in Iggy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PartitionId(i32);

impl PartitionId {
    /// Partition 0, which every topic has.
    pub(crate) const FIRST: PartitionId = PartitionId(0);

    /// The partition a Kafka partition number names; a negative number names none.
    pub(crate) fn new(partition: i32) -> Option<PartitionId> {
        (partition >= 0).then_some(PartitionId(partition))
    }

    /// The partition a client named in a request on `topic`: a negative number is
    /// [`StoreError::UnknownTopicOrPartition`], as in Kafka.
    pub(crate) fn of(topic: &str, partition: i32) -> StoreResult<PartitionId> {
        PartitionId::new(partition).ok_or_else(|| StoreError::UnknownTopicOrPartition {
            topic: topic.to_owned(),
            partition,
        })
    }

    /// The Kafka partition number.
    pub(crate) fn kafka(self) -> i32 {
        self.0
    }

    /// The Iggy partition id (exact: the number is never negative).
    pub(crate) fn iggy(self) -> u32 {
        self.0.unsigned_abs()
    }

    /// Whether a topic of `count` Iggy partitions has this one.
    pub(crate) fn is_below(self, count: u32) -> bool {
        self.iggy() < count
    }
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition count a client asked for, as Iggy's `u32`: at least 1, else
/// [`StoreError::InvalidPartitions`].
pub(crate) fn count_for_iggy(count: i32) -> StoreResult<u32> {
    match u32::try_from(count) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(StoreError::InvalidPartitions(format!(
            "{count} partitions (at least 1)"
        ))),
    }
}

/// The partition count Iggy reports for `topic`, as Kafka's `i32`. Past `i32::MAX`
/// Kafka has no numbers for the partitions, which is the bridge's failure, not the
/// client's.
pub(crate) fn count_for_kafka(topic: &str, count: u32) -> StoreResult<i32> {
    i32::try_from(count).map_err(|_| {
        StoreError::Internal(format!(
            "topic {topic} has {count} partitions in Iggy, more than Kafka can number"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_the_same_number_in_kafka_and_iggy() {
        for n in [0, 1, 7, i32::MAX] {
            let p = PartitionId::of("t", n).unwrap();
            assert_eq!(p.kafka(), n);
            assert_eq!(i64::from(p.iggy()), i64::from(n));
        }
        assert_eq!(PartitionId::FIRST, PartitionId::new(0).unwrap());
        assert!(PartitionId::new(3).unwrap().is_below(4));
        assert!(!PartitionId::new(4).unwrap().is_below(4));
        assert_eq!(PartitionId::new(12).unwrap().to_string(), "12");
    }

    #[test]
    fn a_negative_partition_is_unknown_not_another_partition() {
        for n in [-1, i32::MIN] {
            assert_eq!(PartitionId::new(n), None);
            assert!(matches!(
                PartitionId::of("orders", n),
                Err(StoreError::UnknownTopicOrPartition { topic, partition })
                    if topic == "orders" && partition == n
            ));
        }
    }

    #[test]
    fn partition_counts_are_checked_both_ways() {
        assert_eq!(count_for_iggy(1).unwrap(), 1);
        assert_eq!(count_for_iggy(i32::MAX).unwrap(), i32::MAX.unsigned_abs());
        for bad in [0, -1, i32::MIN] {
            assert!(matches!(
                count_for_iggy(bad),
                Err(StoreError::InvalidPartitions(_))
            ));
        }
        assert_eq!(count_for_kafka("t", 3).unwrap(), 3);
        assert!(matches!(
            count_for_kafka("t", u32::MAX),
            Err(StoreError::Internal(_))
        ));
    }
}
