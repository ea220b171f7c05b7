//! Shared broker state: configuration, stores, producer state and the validation pool.

use crate::budget::{RequestBudget, ResponseBudget};
use crate::cluster::Route;
use crate::config::BrokerConfig;
use crate::cpu::CpuPool;
use crate::groups::{Groups, OffsetRetention};
use crate::pipeline::Pipeline;
use crate::pipeline::authentication::Authentication;
use crate::producers::Producers;
use crate::quotas::Quotas;
use crate::server::Stores;
use kafka_store::cluster::{Member, MemberListener, Membership, SingleMember};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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
    pub(crate) request_memory: Arc<RequestBudget>,
    /// Read buffers kept for large request frames.
    pub(crate) frame_pool: Arc<crate::frame_pool::FramePool>,
    /// Encoded response bytes waiting for writers over all connections.
    pub(crate) response_memory: Arc<ResponseBudget>,
    /// Where CPU-heavy request work runs (decompression, timestamp scans).
    pub(crate) cpu: CpuPool,
    /// Client quotas: configured entities and usage.
    pub(crate) quotas: Arc<Quotas>,
    /// SASL authentication (also a layer of the pipeline), when an authenticator is set:
    /// the connection loop hands it the raw tokens of the v0 flow, and the SCRAM
    /// credential APIs use its store.
    pub(crate) authentication: Option<Arc<Authentication>>,
    /// The ACL bindings (their store and the snapshot decisions are taken from):
    /// DescribeAcls, CreateAcls and DeleteAcls work on it.
    #[allow(dead_code)] // read by the authorization layer and the ACL handlers
    pub(crate) acls: Arc<kafka_authz::AclAuthorizer>,
    /// The other sources of decisions (the principal's Iggy permissions with the
    /// bridge); a request is allowed where the ACLs and every one of these allow it.
    #[allow(dead_code)] // read by the authorization layer and the ACL handlers
    pub(crate) authorizers: Vec<Arc<dyn kafka_authz::Authorizer>>,
    /// Whether requests are authorized (the authorization layer is in the pipeline).
    /// Without it the ACL APIs answer `SECURITY_DISABLED`, as a Kafka broker without an
    /// authorizer does.
    pub(crate) authorization_enabled: bool,
    /// The gateways sharing the store: who leads which partition and coordinates which
    /// group (a gateway alone: itself). Set with [`Broker::set_membership`], which also
    /// has the coordinator follow it.
    pub(crate) membership: Arc<dyn Membership>,
    /// The transaction coordinator (the transactional ids of the shards loaded here).
    pub(crate) txns: crate::txns::coordinator::Txns,
    /// The partition side of transactions, for the partitions led here.
    pub(crate) txn_partitions: Arc<crate::txns::partitions::TxnPartitions>,
    /// Carries markers and verifications to the gateway that leads each partition.
    pub(crate) txn_router: Arc<crate::txns::Router>,
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
        let broker = Broker::with_quotas(config, stores, pipeline, Arc::new(quotas));
        broker.groups.follow(Arc::clone(&broker.membership));
        broker
    }

    /// Routes by `membership` from now on, and loads the coordinator shards it places
    /// here (what an earlier membership loaded is let go first).
    pub(crate) fn set_membership(&mut self, membership: Arc<dyn Membership>) {
        self.groups.follow(Arc::clone(&membership));
        self.txn_router.peers.follow(Arc::clone(&membership));
        self.membership = membership;
    }

    pub(crate) fn with_quotas(
        config: BrokerConfig,
        stores: Stores,
        pipeline: Pipeline,
        quotas: Arc<Quotas>,
    ) -> Self {
        // Producer ids: the instance id in the high 16 bits (below the sign bit), random
        // bits below, so gateways fronting one store never hand out the same id.
        let producers = Producers::new(
            config.instance_id,
            config.limits.producer_id_expiration,
            config.limits.max_producer_states,
        )
        .limit_recoveries(config.limits.max_concurrent_producer_recoveries)
        .wait_for_lagging_reads(config.limits.producer_state_recovery_lag_wait);
        let cpu = CpuPool::new(config.limits.validation_threads);
        let groups = Groups::spawn(
            config.groups.clone(),
            OffsetRetention {
                retention: config.limits.offsets_retention,
                max_groups: config.limits.max_groups_with_offsets,
            },
            Arc::clone(&stores.offsets),
            config.group_state.clone(),
        );
        let alone = Arc::new(SingleMember::new(Member {
            node_id: config.node_id,
            epoch: 0,
            listeners: vec![MemberListener {
                name: "PLAINTEXT".into(),
                host: config.advertised_host.clone(),
                port: config.advertised_port,
            }],
        }));
        let txn_router = Arc::new(crate::txns::Router::new(crate::peer::PeerClient::new(
            config.inter_gateway.clone(),
        )));
        let txns = crate::txns::coordinator::Txns::spawn(
            config.transactions.clone(),
            Arc::clone(&stores.offsets),
            Arc::clone(&txn_router) as Arc<dyn crate::txns::TxnRouter>,
        );
        // The groups' follower loads and unloads the transactional ids with the shards.
        groups.attach_txns(txns.clone());
        let txn_partitions = Arc::new(crate::txns::partitions::TxnPartitions::with_limits(
            crate::txns::partitions::TxnPartitionLimits::of(&config.transactions),
        ));
        let request_memory = Arc::new(RequestBudget::new(&config.limits));
        let frame_pool = crate::frame_pool::FramePool::new(config.limits.frame_pool_bytes);
        let response_memory = Arc::new(ResponseBudget::new(&config.limits));
        Broker {
            config,
            stores,
            producers,
            groups,
            pipeline,
            request_memory,
            frame_pool,
            response_memory,
            cpu,
            quotas,
            authentication: None,
            acls: Arc::new(kafka_authz::AclAuthorizer::new(
                Arc::new(kafka_authz::store::MemoryAclStore::new()),
                true,
            )),
            authorizers: Vec::new(),
            authorization_enabled: false,
            membership: alone,
            txns,
            txn_partitions,
            txn_router,
        }
    }

    /// What this request sees of the membership (see [`Route`]).
    pub(crate) fn route(&self) -> Route {
        Route::of(self.membership.as_ref())
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
