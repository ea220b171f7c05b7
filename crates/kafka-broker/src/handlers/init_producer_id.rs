//! InitProducerId (key 22): producer ids for idempotent producers.
//!
//! Ids are random within the gateway's instance range (see [`crate::producers`]). A
//! producer that presents its id and current epoch (v3+, KIP-360, after a timeout or an
//! unknown-sequence error) keeps its id with the epoch bumped; any other id or epoch,
//! and a bump at the epoch limit, gets a fresh id at epoch 0, as Kafka answers every
//! non-transactional InitProducerId. So no client can fence another producer by naming
//! its id. Transactions are not supported: a transactional id is refused with
//! `UNSUPPORTED_VERSION`, which clients report as "transactions not supported by the
//! broker".

use super::Ctx;
use crate::broker::now_ms;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;

pub(crate) fn handle(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let refused = |code: ErrorCode| InitProducerIdResponse {
        error_code: code.code(),
        producer_id: -1,
        producer_epoch: -1,
        ..InitProducerIdResponse::default()
    };
    if req.transactional_id.is_some() {
        return refused(ErrorCode::UNSUPPORTED_VERSION);
    }
    let (id, epoch) = if ctx.version >= 3 {
        (req.producer_id, req.producer_epoch)
    } else {
        (-1, -1)
    };
    match ctx.broker.producers.init(id, epoch, now_ms()) {
        Some((producer_id, producer_epoch)) => InitProducerIdResponse {
            error_code: ErrorCode::NONE.code(),
            producer_id,
            producer_epoch,
            ..InitProducerIdResponse::default()
        },
        None => refused(ErrorCode::UNKNOWN_SERVER_ERROR),
    }
}
