//! WriteTxnMarkers (key 27): a transaction coordinator on another gateway asks this one,
//! the leader of the partitions, to close a transaction in them.
//!
//! (Skeleton.)

use super::Ctx;
use kafka_protocol::messages::write_txn_markers_request::WriteTxnMarkersRequest;
use kafka_protocol::messages::write_txn_markers_response::WriteTxnMarkersResponse;

pub(crate) async fn handle(
    _ctx: &Ctx<'_>,
    _req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    WriteTxnMarkersResponse::default()
}
