//! The version firewall and the route from a frame to its handler.
//!
//! - ApiVersions at a version this gateway does not know: answered with the v0 body shape,
//!   error `UNSUPPORTED_VERSION` and the full key list, so the client retries lower.
//! - Any other API at an unsupported version, an API this gateway does not implement, or
//!   a frame that does not decode: the connection is closed with a log line, as Kafka does.
//!
//! A decoded request then goes through the [pipeline](crate::pipeline)'s layers to its
//! handler, and the handler's reply back through the layers to the connection.

use crate::broker::Broker;
use crate::handlers::{self, Ctx, Reply};
use crate::pipeline::{Completion, Notes, Request, RequestInfo, Verdict};
use crate::session::Session;
use bytes::Bytes;
use kafka_protocol::api::{
    HeaderPrefix, decode_request_with, encode_api_versions_fallback, encode_response,
};
use kafka_protocol::{ApiKey, DecodeLimits, EncodedFrame, ErrorCode, ProtocolError, ResponseBody};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, error, warn};

/// What to do after one request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send this response.
    Respond(EncodedFrame),
    /// Send this response, then close the connection once it is written.
    RespondThenClose(EncodedFrame),
    /// Send nothing (Produce with acks=0).
    NoResponse,
    /// Close the connection.
    Close,
}

/// How a request proceeds.
pub(crate) enum Step<'a> {
    /// Handled.
    Done(Outcome),
    /// Started; the future completes it (a Produce whose appends hold their place and
    /// wait for the store's confirmation).
    Later {
        outcome: Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>,
    },
}

/// Decodes and handles one frame to the end, for tests that drive the broker without a
/// socket.
#[cfg(test)]
pub(crate) async fn handle(broker: &Broker, peer: std::net::SocketAddr, frame: Bytes) -> Outcome {
    let session = Session::new(0, crate::session::Listener::plaintext(), peer);
    handle_as(broker, session, frame).await
}

/// [`handle`] on a given session (a principal, a listener).
#[cfg(test)]
pub(crate) async fn handle_as(broker: &Broker, session: Session, frame: Bytes) -> Outcome {
    let limits = DecodeLimits {
        max_entries: broker.config.limits.max_decode_entries,
        ..DecodeLimits::default()
    };
    let request = match decode(frame, Instant::now(), &limits) {
        Ok(r) => r,
        Err(rejected) => return rejected.outcome,
    };
    let mut session = Arc::new(session);
    match start(broker, &mut session, request).await {
        Step::Done(outcome) => outcome,
        Step::Later { outcome, .. } => outcome.await,
    }
}

/// A frame the firewall or the decoder refused.
#[derive(Debug)]
pub(crate) struct Rejected {
    /// What to do: the ApiVersions fallback answer, or close.
    pub(crate) outcome: Outcome,
    /// The API, when it is one this gateway serves.
    pub(crate) api: Option<ApiKey>,
    /// The version asked for (-1 when unreadable).
    pub(crate) version: i16,
    /// Why, for metrics and logs.
    pub(crate) reason: &'static str,
}

impl Rejected {
    pub(crate) fn close(api: Option<ApiKey>, version: i16, reason: &'static str) -> Rejected {
        Rejected {
            outcome: Outcome::Close,
            api,
            version,
            reason,
        }
    }
}

/// The reason of a [`Rejected`] from [`decode`] whose lists need more memory than
/// `limits.max_heap_bytes` allowed: the caller may reserve more and decode again.
pub(crate) const NEEDS_MORE_MEMORY: &str = "needs more decode memory";

/// The version firewall and the decode under `limits`: a request ready for the pipeline,
/// or what to do instead (the ApiVersions fallback answer, or closing the connection).
pub(crate) fn decode(
    frame: Bytes,
    received: Instant,
    limits: &DecodeLimits,
) -> Result<Request, Rejected> {
    let prefix = match HeaderPrefix::peek(&frame) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "request header unreadable, closing connection");
            return Err(Rejected::close(None, -1, "unreadable header"));
        }
    };
    let key = ApiKey::from_i16(prefix.api_key);
    let Some(range) = handlers::advertised(key) else {
        warn!(
            api_key = prefix.api_key,
            "unsupported API key, closing connection"
        );
        return Err(Rejected::close(None, prefix.api_version, "unsupported API"));
    };
    if !range.contains(prefix.api_version) {
        if key == ApiKey::ApiVersions {
            let body = handlers::api_versions::response(ErrorCode::UNSUPPORTED_VERSION);
            let outcome = match encode_api_versions_fallback(prefix.correlation_id, &body) {
                Ok(f) => Outcome::Respond(f),
                Err(e) => {
                    error!(error = %e, "could not encode the ApiVersions fallback");
                    Outcome::Close
                }
            };
            return Err(Rejected {
                outcome,
                api: Some(key),
                version: prefix.api_version,
                reason: "unsupported version",
            });
        }
        warn!(
            api = key.name(),
            version = prefix.api_version,
            min = range.min,
            max = range.max,
            "unsupported API version, closing connection"
        );
        return Err(Rejected::close(
            Some(key),
            prefix.api_version,
            "unsupported version",
        ));
    }
    let request = match decode_request_with(&frame, limits) {
        Ok(r) => r,
        Err(ProtocolError::DecodeLimitExceeded {
            limit: "max_heap_bytes",
            ..
        }) if limits.max_heap_bytes < usize::MAX => {
            return Err(Rejected::close(
                Some(key),
                prefix.api_version,
                NEEDS_MORE_MEMORY,
            ));
        }
        Err(e) => {
            warn!(api = key.name(), version = prefix.api_version, error = %e, "malformed request, closing connection");
            debug!(frame = %hex_prefix(&frame, 512), "malformed request bytes");
            return Err(Rejected::close(
                Some(key),
                prefix.api_version,
                "malformed request",
            ));
        }
    };
    if request.trailing_bytes > 0 {
        debug!(
            api = key.name(),
            version = prefix.api_version,
            trailing = request.trailing_bytes,
            "ignoring bytes after the request body"
        );
    }
    Ok(Request {
        api: key,
        version: prefix.api_version,
        correlation_id: prefix.correlation_id,
        client_id: request.header.client_id,
        body: request.body,
        frame_len: frame.len() + 4,
        received,
        notes: Notes::default(),
    })
}

/// Runs a decoded request through the pipeline's layers and its handler. A handler that
/// completes later (Produce) returns [`Step::Later`] once its work holds its place.
pub(crate) async fn start<'a>(
    broker: &'a Broker,
    session: &mut Arc<Session>,
    mut request: Request,
) -> Step<'a> {
    let pipeline = &broker.pipeline;
    let (seen, stop) = pipeline.inbound(Arc::make_mut(session), &mut request).await;
    // Handlers and the way back see the session as it is now, even if a later request
    // changes it before this one completes.
    let session = session.clone();
    let (info, body) = request.split();
    match stop {
        Some((layer, Verdict::Answer(body))) if body.api_key() == info.api => Step::Done(finish(
            broker,
            &session,
            seen,
            info,
            Reply::Body(body),
            Some(layer),
        )),
        Some((layer, Verdict::AnswerThenClose(body, reason))) if body.api_key() == info.api => {
            debug!(layer, reason, "answering, then closing connection");
            let outcome = finish(broker, &session, seen, info, Reply::Body(body), Some(layer));
            Step::Done(match outcome {
                Outcome::Respond(f) => Outcome::RespondThenClose(f),
                _ => Outcome::Close,
            })
        }
        Some((layer, Verdict::Answer(body) | Verdict::AnswerThenClose(body, _))) => {
            // Another API's body would be read as this one's by the client.
            error!(
                layer,
                answered = body.api_key().name(),
                "a layer answered with another API's response, closing connection"
            );
            Step::Done(finish(
                broker,
                &session,
                seen,
                info,
                Reply::Close,
                Some(layer),
            ))
        }
        Some((layer, Verdict::Close(reason))) => {
            warn!(layer, reason, "closing connection");
            Step::Done(finish(
                broker,
                &session,
                seen,
                info,
                Reply::Close,
                Some(layer),
            ))
        }
        Some((_, Verdict::Pass)) | None => {
            let ctx = Ctx {
                broker,
                version: info.version,
                session: session.clone(),
            };
            match handlers::handle(ctx, body).await {
                handlers::Step::Done(reply) => {
                    Step::Done(finish(broker, &session, seen, info, reply, None))
                }
                handlers::Step::Later { reply } => Step::Later {
                    outcome: Box::pin(async move {
                        let reply = reply.await;
                        finish(broker, &session, seen, info, reply, None)
                    }),
                },
            }
        }
    }
}

/// Encodes the reply and shows the outcome to the layers that saw the request.
fn finish(
    broker: &Broker,
    session: &Session,
    seen: usize,
    info: RequestInfo,
    reply: Reply,
    by_layer: Option<&'static str>,
) -> Outcome {
    let (mut body, send): (Option<ResponseBody>, bool) = match reply {
        Reply::Body(b) => (Some(b), true),
        Reply::Unsent(b) => (Some(b), false),
        Reply::Close => (None, false),
    };
    if let Some(b) = body.as_mut() {
        broker.pipeline.reply(seen, session, &info, b);
        if b.api_key() != info.api {
            // Another API's body would be read as this one's by the client.
            error!(
                answered = b.api_key().name(),
                "a layer replaced the response with another API's, closing connection"
            );
            body = None;
        }
    }
    let outcome = match &body {
        None => Outcome::Close,
        Some(_) if !send => Outcome::NoResponse,
        Some(b) => match encode_response(info.correlation_id, info.version, b) {
            Ok(f) => Outcome::Respond(f),
            Err(e) => {
                // A handler filled a field the negotiated version cannot carry: a bug
                // here, not the client's fault; the connection cannot continue in order.
                error!(error = %e, "response encoding failed, closing connection");
                Outcome::Close
            }
        },
    };
    let done = Completion {
        body: body.as_ref(),
        sent_bytes: match &outcome {
            Outcome::Respond(f) => f.len(),
            _ => 0,
        },
        closed: matches!(outcome, Outcome::Close),
        by_layer,
    };
    broker.pipeline.outbound(seen, session, &info, &done);
    outcome
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
