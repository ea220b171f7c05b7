//! Shared broker state: configuration, stores, and the producer-id allocator.

use crate::config::BrokerConfig;
use crate::groups::Groups;
use crate::pipeline::Pipeline;
use crate::producers::Producers;
use crate::quotas::Quotas;
use crate::server::Stores;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

/// State shared by every connection.
#[derive(Debug)]
pub(crate) struct Broker {
    pub(crate) config: BrokerConfig,
    pub(crate) stores: Stores,
    pub(crate) producers: Producers,
    pub(crate) groups: Groups,
    /// The layers every request passes through.
    pub(crate) pipeline: Pipeline,
    /// Budget of request bytes buffered over all connections.
    pub(crate) request_memory: Arc<Semaphore>,
    /// Client quotas: configured entities and usage.
    pub(crate) quotas: Arc<Quotas>,
    next_producer_id: AtomicI64,
}

impl Broker {
    /// A broker with in-memory quota entities (tests).
    #[cfg(test)]
    pub(crate) fn new(config: BrokerConfig, stores: Stores, pipeline: Pipeline) -> Self {
        // The memory store loads nothing and cannot fail.
        let quotas = Quotas::new(
            config.quotas.clone(),
            Arc::new(crate::quotas::MemoryQuotaStore::default()),
        )
        .unwrap_or_else(|_| unreachable!("the memory quota store cannot fail"));
        Broker::with_quotas(config, stores, pipeline, Arc::new(quotas))
    }

    pub(crate) fn with_quotas(
        config: BrokerConfig,
        stores: Stores,
        pipeline: Pipeline,
        quotas: Arc<Quotas>,
    ) -> Self {
        // Producer ids: the instance id in the high 16 bits (below the sign bit), a
        // counter below, so gateways fronting one store never hand out the same id.
        let base = i64::from(config.instance_id & 0x7fff) << 48;
        let groups = Groups::spawn(config.groups.clone());
        let budget = config
            .limits
            .max_buffered_request_bytes
            .min(Semaphore::MAX_PERMITS);
        Broker {
            config,
            stores,
            producers: Producers::default(),
            groups,
            pipeline,
            request_memory: Arc::new(Semaphore::new(budget)),
            quotas,
            next_producer_id: AtomicI64::new(base),
        }
    }

    /// A fresh producer id.
    pub(crate) fn allocate_producer_id(&self) -> i64 {
        self.next_producer_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
