//! InitProducerId (key 22): producer ids for idempotent producers.
//!
//! Ids are random within the gateway's instance range (see [`crate::producers`]). A
//! producer that presents its id and current epoch (v3+, KIP-360, after a timeout or an
//! unknown-sequence error) keeps its id with the epoch bumped; any other id or epoch,
//! and a bump at the epoch limit, gets a fresh id at epoch 0, as Kafka answers every
//! non-transactional InitProducerId. So no client can fence another producer by naming
//! its id.
//!
//! With a transactional id the transaction coordinator answers (the gateway coordinating
//! the id's shard, refused like the other transaction APIs elsewhere): it keeps the id's
//! producer id and bumps its epoch, fencing older incarnations and aborting what they
//! left open. A producer id it needs (a new transactional id, or an exhausted epoch) is
//! drawn from the same instance range as idempotent producers, so ids handed out by two
//! gateways never collide.

use super::Ctx;
use crate::broker::now_ms;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;

pub(crate) async fn handle(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let refused = |code: ErrorCode| InitProducerIdResponse {
        error_code: code.code(),
        producer_id: -1,
        producer_epoch: -1,
        ..InitProducerIdResponse::default()
    };
    if let Some(id) = req.transactional_id.as_deref() {
        return match transactional(ctx, id, &req).await {
            Ok((producer_id, producer_epoch)) => InitProducerIdResponse {
                error_code: ErrorCode::NONE.code(),
                producer_id,
                producer_epoch,
                ..InitProducerIdResponse::default()
            },
            Err(code) => refused(code),
        };
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

/// InitProducerId for a transactional id.
async fn transactional(
    ctx: &Ctx<'_>,
    id: &str,
    req: &InitProducerIdRequest,
) -> Result<(i64, i16), ErrorCode> {
    if id.is_empty() {
        return Err(ErrorCode::INVALID_REQUEST);
    }
    // v3+: the producer id and epoch the client has, both or neither.
    let expected = match (ctx.version >= 3, req.producer_id, req.producer_epoch) {
        (false, ..) | (true, -1, -1) => None,
        (true, -1, _) | (true, _, -1) => return Err(ErrorCode::INVALID_REQUEST),
        (true, pid, epoch) => Some((pid, epoch)),
    };
    if let Some(e) = super::txn::refusal(ctx, id).await {
        return Err(e);
    }
    let (fresh, _) = ctx
        .broker
        .producers
        .allocate(now_ms())
        .ok_or(ErrorCode::UNKNOWN_SERVER_ERROR)?;
    ctx.broker
        .txns
        .init_producer_id(kafka_txn::InitProducerId {
            request: kafka_txn::RequestId(0),
            transactional_id: id.to_owned(),
            timeout_ms: req.transaction_timeout_ms,
            expected,
            version: ctx.version,
            fresh_producer_id: fresh,
        })
        .await
}
