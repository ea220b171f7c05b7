//! DescribeCluster (key 60): the live gateways as Metadata lists them, and the lowest
//! live node id as the controller.

use super::{Ctx, bs};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};

pub(crate) fn handle(ctx: &Ctx<'_>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let c = &ctx.broker.config;
    // Endpoint type 1 is "brokers"; 2 asks for controllers, which are not exposed.
    if ctx.version >= 1 && req.endpoint_type != 1 {
        return DescribeClusterResponse {
            error_code: ErrorCode::UNSUPPORTED_ENDPOINT_TYPE.code(),
            error_message: Some(bs("only the broker endpoint type is served")),
            endpoint_type: req.endpoint_type,
            ..DescribeClusterResponse::default()
        };
    }
    let route = ctx.broker.route();
    let brokers = super::metadata::live_brokers(ctx, &route)
        .map(|(broker_id, host, port)| DescribeClusterBroker {
            broker_id,
            host: bs(host.to_owned()),
            port: i32::from(port),
            rack: None,
            ..DescribeClusterBroker::default()
        })
        .collect();
    DescribeClusterResponse {
        error_code: ErrorCode::NONE.code(),
        endpoint_type: req.endpoint_type,
        cluster_id: bs(c.cluster_id.clone()),
        controller_id: crate::cluster::controller(&route.view).unwrap_or(-1),
        brokers,
        // KIP-430: without authorization every operation the cluster supports, as Kafka
        // answers without an authorizer; the authorization layer, when on, puts the
        // principal's own.
        cluster_authorized_operations: if req.include_cluster_authorized_operations {
            crate::authz::api::all_operations(crate::authz::ResourceType::Cluster)
        } else {
            i32::MIN
        },
        ..DescribeClusterResponse::default()
    }
}
