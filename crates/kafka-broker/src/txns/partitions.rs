//! The partition side of transactions, for the partitions this gateway leads.
//!
//! (Skeleton: index per partition, last stable offset, markers.)

use crate::broker::Broker;
use crate::txns::MarkerWrite;
use kafka_protocol::ErrorCode;
use kafka_store::txn_index::AbortedTxn;

/// Per led partition: its transaction index and what is being appended.
#[derive(Debug)]
pub(crate) struct TxnPartitions {
    rebuild_max_bytes: usize,
}

impl TxnPartitions {
    pub(crate) fn new(rebuild_max_bytes: usize) -> Self {
        TxnPartitions { rebuild_max_bytes }
    }

    /// The last stable offset: `high_watermark` unless a transaction is open below it.
    pub(crate) fn lso(&self, _topic: &str, _partition: i32, high_watermark: i64) -> i64 {
        let _ = self.rebuild_max_bytes;
        high_watermark
    }

    /// Aborted transactions intersecting `[from, to)`.
    pub(crate) fn aborted(
        &self,
        _topic: &str,
        _partition: i32,
        _from: i64,
        _to: i64,
    ) -> Vec<AbortedTxn> {
        Vec::new()
    }

    /// Writes one marker to a partition this gateway leads.
    pub(crate) async fn write_marker(&self, _broker: &Broker, _marker: &MarkerWrite) -> ErrorCode {
        ErrorCode::NOT_LEADER_OR_FOLLOWER
    }

    /// Forgets a deleted topic.
    pub(crate) fn forget_topic(&self, _topic: &str) {}
}
