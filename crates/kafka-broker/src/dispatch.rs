//! The version firewall and the route from a frame to its handler.
//!
//! - ApiVersions at a version this gateway does not know: answered with the v0 body shape,
//!   error `UNSUPPORTED_VERSION` and the full key list, so the client retries lower.
//! - Any other API at an unsupported version, an API this gateway does not implement, or
//!   a frame that does not decode: the connection is closed with a log line, as Kafka does.

use crate::broker::Broker;
use crate::handlers::{self, Ctx, produce};
use bytes::Bytes;
use kafka_protocol::api::{
    HeaderPrefix, decode_request, encode_api_versions_fallback, encode_response,
};
use kafka_protocol::{ApiKey, EncodedFrame, ErrorCode, RequestBody};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use tracing::{error, warn};

/// What to do after one request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send this response.
    Respond(EncodedFrame),
    /// Send nothing (Produce with acks=0).
    NoResponse,
    /// Close the connection.
    Close,
}

/// How a request proceeds.
pub(crate) enum Step<'a> {
    /// Handled.
    Done(Outcome),
    /// A Produce request whose appends hold their place in their partitions; the future
    /// waits for the store to confirm them and gives the outcome.
    Later {
        outcome: Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>,
        /// The request must be complete before the next one is started (see
        /// [`produce::Prepared::exclusive`]).
        exclusive: bool,
    },
}

/// Handles one request to the end.
#[cfg(test)]
pub(crate) async fn handle(broker: &Broker, peer: SocketAddr, frame: Bytes) -> Outcome {
    match start(broker, peer, frame).await {
        Step::Done(outcome) => outcome,
        Step::Later { outcome, .. } => outcome.await,
    }
}

/// Starts one request: a Produce returns once its appends hold their place (the rest
/// is [`Step::Later`]); any other request is handled to the end.
pub(crate) async fn start(broker: &Broker, peer: SocketAddr, frame: Bytes) -> Step<'_> {
    let (prefix, key, request) = match decode(peer, &frame) {
        Ok(decoded) => decoded,
        Err(outcome) => return Step::Done(outcome),
    };
    let ctx = Ctx {
        broker,
        version: prefix.api_version,
        peer,
        client_id: request
            .header
            .client_id
            .as_deref()
            .unwrap_or_default()
            .to_string(),
    };
    let body = match request.body {
        RequestBody::Produce(req) => {
            let prepared = produce::prepare(&ctx, req).await;
            let exclusive = prepared.exclusive();
            let submitted = produce::submit(&ctx, prepared).await;
            let outcome = async move {
                let reply = match produce::complete(&ctx, submitted).await {
                    Some(r) => handlers::Reply::Body(r.into()),
                    None => handlers::Reply::Nothing,
                };
                respond(&ctx, prefix, key, reply)
            };
            return Step::Later {
                outcome: Box::pin(outcome),
                exclusive,
            };
        }
        body => body,
    };
    let reply = handlers::handle(&ctx, body).await;
    Step::Done(respond(&ctx, prefix, key, reply))
}

/// The header checks and the body decode; `Err` is what to do instead of handling it.
fn decode(
    peer: SocketAddr,
    frame: &Bytes,
) -> Result<(HeaderPrefix, ApiKey, kafka_protocol::api::RequestFrame), Outcome> {
    let prefix = match HeaderPrefix::peek(frame) {
        Ok(p) => p,
        Err(e) => {
            warn!(%peer, error = %e, "request header unreadable, closing connection");
            return Err(Outcome::Close);
        }
    };
    let key = ApiKey::from_i16(prefix.api_key);
    let Some(range) = handlers::advertised(key) else {
        warn!(%peer, api_key = prefix.api_key, "unsupported API key, closing connection");
        return Err(Outcome::Close);
    };
    if !range.contains(prefix.api_version) {
        if key == ApiKey::ApiVersions {
            let body = handlers::api_versions::response(ErrorCode::UNSUPPORTED_VERSION);
            return Err(
                match encode_api_versions_fallback(prefix.correlation_id, &body) {
                    Ok(f) => Outcome::Respond(f),
                    Err(e) => {
                        error!(%peer, error = %e, "could not encode the ApiVersions fallback");
                        Outcome::Close
                    }
                },
            );
        }
        warn!(
            %peer,
            api = key.name(),
            version = prefix.api_version,
            min = range.min,
            max = range.max,
            "unsupported API version, closing connection"
        );
        return Err(Outcome::Close);
    }
    let request = match decode_request(frame) {
        Ok(r) => r,
        Err(e) => {
            warn!(%peer, api = key.name(), version = prefix.api_version, error = %e, "malformed request, closing connection");
            tracing::debug!(%peer, frame = %hex_prefix(frame, 512), "malformed request bytes");
            return Err(Outcome::Close);
        }
    };
    if request.trailing_bytes > 0 {
        tracing::debug!(%peer, api = key.name(), version = prefix.api_version, trailing = request.trailing_bytes, "ignoring bytes after the request body");
    }
    Ok((prefix, key, request))
}

/// Encodes a handler's reply.
fn respond(ctx: &Ctx<'_>, prefix: HeaderPrefix, key: ApiKey, reply: handlers::Reply) -> Outcome {
    let body = match reply {
        handlers::Reply::Body(b) => b,
        handlers::Reply::Nothing => return Outcome::NoResponse,
        handlers::Reply::Close => return Outcome::Close,
    };
    match encode_response(prefix.correlation_id, prefix.api_version, &body) {
        Ok(f) => Outcome::Respond(f),
        Err(e) => {
            // A handler filled a field the negotiated version cannot carry: a bug here,
            // not the client's fault; the connection cannot continue in order.
            error!(peer = %ctx.peer, api = key.name(), version = prefix.api_version, error = %e, "response encoding failed, closing connection");
            Outcome::Close
        }
    }
}

/// The first `max` bytes of a frame in hex, for debug logs of malformed requests.
fn hex_prefix(frame: &[u8], max: usize) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(2 * max.min(frame.len()) + 16);
    for b in frame.iter().take(max) {
        let _ = write!(s, "{b:02x}");
    }
    if frame.len() > max {
        let _ = write!(s, "... ({} bytes)", frame.len());
    }
    s
}
