//! The driver around the sans-IO transaction coordinator ([`kafka_txn::TxnCoordinator`]).
//!
//! (Skeleton: one task owns the machine; handlers send it commands and await replies.)

use crate::config::TransactionSettings;
use crate::store::OffsetStore;
use crate::txns::TxnRouter;
use std::sync::Arc;

/// Handle to the transaction coordinator task; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Txns {
    pub(crate) settings: TransactionSettings,
}

impl Txns {
    /// Starts the coordinator task. No shard is loaded until the groups' follower loads one.
    pub(crate) fn spawn(
        settings: TransactionSettings,
        store: Arc<dyn OffsetStore>,
        router: Arc<dyn TxnRouter>,
    ) -> Txns {
        let _ = (store, router);
        Txns { settings }
    }
}
