//! InitProducerId (key 22): producer ids for idempotent producers.
//!
//! Ids carry the gateway's instance id in their high bits. A producer that presents its
//! current id and epoch (v3+, after a timeout or an unknown-sequence error) keeps its id
//! with the epoch bumped; at the epoch limit it gets a new id. Transactions are not
//! supported: a transactional id is refused with `UNSUPPORTED_VERSION`, which clients
//! report as "transactions not supported by the broker".

use super::Ctx;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;

pub(crate) fn handle(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    if req.transactional_id.is_some() {
        return InitProducerIdResponse {
            error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
            producer_id: -1,
            producer_epoch: -1,
            ..InitProducerIdResponse::default()
        };
    }
    let (producer_id, producer_epoch) =
        if req.producer_id >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
            (req.producer_id, req.producer_epoch + 1)
        } else {
            (ctx.broker.allocate_producer_id(), 0)
        };
    InitProducerIdResponse {
        error_code: ErrorCode::NONE.code(),
        producer_id,
        producer_epoch,
        ..InitProducerIdResponse::default()
    }
}
