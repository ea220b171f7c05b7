//! Long-poll notification: one `watch` channel per partition a fetch waits on, carrying
//! the high watermark after this gateway's own appends. Appends by native Iggy
//! producers are not seen here; waiting fetches find them by re-reading at
//! `poll_interval`.

use super::IggyBridge;
use crate::config::IggyTopicRef;
use crate::partition::PartitionId;
use tokio::sync::watch;

/// Most partitions with long-poll notification channels; past it they start over.
const MAX_WATCHED_PARTITIONS: usize = 100_000;

impl IggyBridge {
    /// Tells long polls on this gateway that `partition` now ends at `high_watermark`.
    pub(super) fn notify(
        &self,
        target: &IggyTopicRef,
        partition: PartitionId,
        high_watermark: i64,
    ) {
        if let Ok(watches) = self.inner.watches.lock()
            && let Some(tx) = watches.get(&(target.clone(), partition))
        {
            tx.send_if_modified(|v| {
                let grew = high_watermark > *v;
                if grew {
                    *v = high_watermark;
                }
                grew
            });
        }
    }

    /// A receiver of the high watermark of `partition`, for [`kafka_store::LogStore::watch`].
    /// Only for topics this gateway has looked up (their description is cached, however
    /// old), as this cannot ask Iggy. The initial value is the high watermark as last seen.
    pub(super) fn watch_partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<watch::Receiver<i64>> {
        let p = PartitionId::new(partition)?;
        let r = self.cached_any_age(topic)?;
        if !p.is_below(r.partitions_count) {
            return None;
        }
        let key = (r.target.clone(), p);
        let mut watches = self.inner.watches.lock().ok()?;
        if let Some(tx) = watches.get(&key) {
            return Some(tx.subscribe());
        }
        if watches.len() >= MAX_WATCHED_PARTITIONS {
            // Dropping the senders ends the waits on them; those fetches fall back to
            // re-reading at the poll interval.
            watches.clear();
        }
        let seen = self.watermarks_of(&r, p).ok()?.high_watermark;
        Some(
            watches
                .entry(key)
                .or_insert(watch::channel(seen).0)
                .subscribe(),
        )
    }

    /// Ends the long polls on the partitions of a deleted topic.
    pub(super) fn forget_watches(&self, target: &IggyTopicRef) {
        if let Ok(mut watches) = self.inner.watches.lock() {
            watches.retain(|(t, _), _| t != target);
        }
    }
}
