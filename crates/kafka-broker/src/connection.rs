//! One client connection: framing, timeouts, and in-order responses.
//!
//! Three parts run concurrently for a connection:
//!
//! ```text
//! reader --frames (bounded queue)--> processor --responses (bounded queue)--> writer
//! ```
//!
//! The reader splits size-prefixed frames (refusing sizes over the limit before buffering
//! them), the processor starts requests in arrival order, and the writer sends responses,
//! always in request order, while later requests are processed. The queues bound how far a
//! client can pipeline.
//!
//! Consecutive Produce requests overlap: a Produce is started (validated, and its batches
//! handed to the store with [`LogStore::submit`](crate::store::LogStore::submit), which
//! fixes their place in each partition) before the next request is read, and its response
//! waits for the store's confirmation while the next Produce is started. So a producer's
//! pipelined batches land in the order sent, as with Kafka, and a backend that answers
//! over the network confirms several requests per round trip. At most
//! `max_in_flight_per_connection` Produce requests wait at once. Any other request first
//! waits until every earlier one is complete, so it sees their effects; so does the
//! request after one carrying an idempotent producer's batches, whose sequence checks
//! need the previous outcome.
//!
//! Timeouts: `idle` between frames, `read` from the first byte of a frame to its last
//! (one deadline for the whole frame, so a trickle of bytes cannot hold it open),
//! `write` per response.
//!
//! Memory: before the body of a frame is read, its size is taken from a broker-wide
//! budget (`Limits::max_buffered_request_bytes`) and given back once the request has been
//! handled, so connections together never buffer more than that. Any violation, a malformed frame, an unknown API or an unsupported
//! version closes the connection with a log line.

use crate::broker::Broker;
use crate::dispatch::{self, Outcome, Step};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use kafka_protocol::api::HeaderPrefix;
use kafka_protocol::frame::{Framed, split_frame};
use kafka_protocol::{ApiKey, EncodedFrame};
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Serves one connection until the client leaves, a limit is hit, or shutdown.
pub(crate) async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    stop: watch::Receiver<bool>,
) {
    let _ = socket.set_nodelay(true);
    let (rd, wr) = socket.into_split();
    let depth = broker.config.limits.max_in_flight_per_connection;
    let (frames_tx, frames_rx) = mpsc::channel::<(Bytes, OwnedSemaphorePermit)>(depth);
    let (resp_tx, resp_rx) = mpsc::channel::<EncodedFrame>(depth);

    let reader = read_frames(rd, peer, broker.clone(), frames_tx, stop);
    let processor = process(peer, broker.clone(), frames_rx, resp_tx);
    let writer = write_responses(wr, peer, broker.clone(), resp_rx);
    // The reader ends first (EOF, error, shutdown); the processor then drains the queued
    // requests and the writer sends their responses before the socket closes.
    let _ = tokio::join!(reader, processor, writer);
    debug!(%peer, "connection closed");
}

async fn read_frames(
    mut rd: OwnedReadHalf,
    peer: SocketAddr,
    broker: Arc<Broker>,
    frames: mpsc::Sender<(Bytes, OwnedSemaphorePermit)>,
    mut stop: watch::Receiver<bool>,
) {
    let limits = &broker.config.limits;
    let timeouts = &broker.config.timeouts;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    // Memory reserved (from the broker-wide budget) for the frame being read, and when
    // that frame must be complete.
    let mut reserved: Option<OwnedSemaphorePermit> = None;
    let mut frame_deadline: Option<Instant> = None;
    loop {
        match split_frame(&mut buf, limits.max_frame_size) {
            Framed::Frame(frame) => {
                let permit = match reserved.take() {
                    Some(p) => p,
                    // A frame that arrived whole in one read: reserve it now.
                    None => match reserve(&broker, frame.len() + 4, &mut stop).await {
                        Some(p) => p,
                        None => return,
                    },
                };
                frame_deadline = None;
                if frames.send((frame, permit)).await.is_err() {
                    return;
                }
                continue;
            }
            Framed::TooLarge { size, max } => {
                warn!(%peer, size, max, "frame larger than the maximum, closing connection");
                return;
            }
            Framed::Negative { size } => {
                warn!(%peer, size, "negative frame size, closing connection");
                return;
            }
            Framed::NeedMore { needed } => {
                if buf.len() >= 4 && reserved.is_none() {
                    // The size is known and within the maximum: wait for room in the
                    // buffer budget before reading the body, so that many connections
                    // announcing large frames cannot exhaust memory together.
                    let size = buf.len() + needed;
                    match reserve(&broker, size, &mut stop).await {
                        Some(p) => reserved = Some(p),
                        None => return,
                    }
                }
                // Grow by what the announced frame still needs: all of it at once when
                // its size has been taken from the budget (no copying regrowth of large
                // frames), else a bounded step.
                let grow = if reserved.is_some() {
                    needed
                } else {
                    needed.min(64 * 1024)
                };
                buf.reserve(grow);
            }
        }
        let at_boundary = buf.is_empty();
        let deadline = if at_boundary {
            Instant::now() + timeouts.idle
        } else {
            *frame_deadline.get_or_insert_with(|| Instant::now() + timeouts.read)
        };
        let read = tokio::select! {
            r = tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)) => r,
            _ = stop.wait_for(|s| *s) => {
                debug!(%peer, "shutdown: no more requests read from this connection");
                return;
            }
        };
        match read {
            Ok(Ok(0)) => {
                if !at_boundary {
                    info!(%peer, buffered = buf.len(), "connection closed inside a frame");
                }
                return;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                debug!(%peer, error = %e, "read failed");
                return;
            }
            Err(_) if at_boundary => {
                info!(%peer, timeout = ?timeouts.idle, "idle timeout, closing connection");
                return;
            }
            Err(_) => {
                warn!(%peer, timeout = ?timeouts.read, buffered = buf.len(), "frame not completed within the read timeout, closing connection");
                return;
            }
        }
    }
}

/// Takes `bytes` from the broker-wide request buffer budget, waiting for room. `None`
/// when the broker is shutting down.
async fn reserve(
    broker: &Broker,
    bytes: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    // Frames are at most max_frame_size, which validation keeps within the budget and
    // below u32::MAX, so the request can always be granted eventually.
    let n = u32::try_from(bytes).unwrap_or(u32::MAX);
    tokio::select! {
        p = broker.request_memory.clone().acquire_many_owned(n) => p.ok(),
        _ = stop.wait_for(|s| *s) => None,
    }
}

/// Started requests waiting for their outcome, oldest first.
type Waiting<'a> = FuturesOrdered<Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>>;

async fn process(
    peer: SocketAddr,
    broker: Arc<Broker>,
    mut frames: mpsc::Receiver<(Bytes, OwnedSemaphorePermit)>,
    responses: mpsc::Sender<EncodedFrame>,
) {
    let depth = broker.config.limits.max_in_flight_per_connection.max(1);
    // Produce requests whose appends hold their place and wait for the store, oldest
    // first; their outcomes are delivered in this order.
    let mut waiting: Waiting<'_> = FuturesOrdered::new();
    loop {
        let (frame, permit) = tokio::select! {
            biased;
            Some(outcome) = waiting.next(), if !waiting.is_empty() => {
                if !deliver(outcome, &responses).await {
                    return;
                }
                continue;
            }
            next = frames.recv(), if waiting.len() < depth => match next {
                Some(next) => next,
                None => break,
            },
        };
        // Only consecutive Produce requests overlap: anything else starts once every
        // earlier request is complete, so it sees their effects, as with Kafka.
        let produce = HeaderPrefix::peek(&frame)
            .is_ok_and(|p| ApiKey::from_i16(p.api_key) == ApiKey::Produce);
        if !produce && !finish(&mut waiting, &responses).await {
            return;
        }
        match dispatch::start(&broker, peer, frame).await {
            Step::Done(outcome) => {
                // The request's bytes are released once it is handled (payloads the
                // store keeps are its own memory, under its own limits).
                drop(permit);
                if !finish(&mut waiting, &responses).await || !deliver(outcome, &responses).await {
                    return;
                }
            }
            Step::Later { outcome, exclusive } => {
                waiting.push_back(Box::pin(async move {
                    let outcome = outcome.await;
                    drop(permit);
                    outcome
                }));
                if exclusive && !finish(&mut waiting, &responses).await {
                    return;
                }
            }
        }
    }
    // The reader has stopped: the requests still waiting are answered.
    finish(&mut waiting, &responses).await;
}

/// Waits for every started request and delivers its outcome, in order; `false` when the
/// connection must close.
async fn finish(waiting: &mut Waiting<'_>, responses: &mpsc::Sender<EncodedFrame>) -> bool {
    while let Some(outcome) = waiting.next().await {
        if !deliver(outcome, responses).await {
            return false;
        }
    }
    true
}

/// Hands a response to the writer; `false` when the connection must close.
async fn deliver(outcome: Outcome, responses: &mpsc::Sender<EncodedFrame>) -> bool {
    match outcome {
        Outcome::Respond(r) => responses.send(r).await.is_ok(),
        Outcome::NoResponse => true,
        Outcome::Close => false,
    }
}

async fn write_responses(
    mut wr: OwnedWriteHalf,
    peer: SocketAddr,
    broker: Arc<Broker>,
    mut responses: mpsc::Receiver<EncodedFrame>,
) {
    let limit = broker.config.timeouts.write;
    while let Some(frame) = responses.recv().await {
        match tokio::time::timeout(limit, write_segments(&mut wr, &frame.segments)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                debug!(%peer, error = %e, "write failed");
                return;
            }
            Err(_) => {
                warn!(%peer, timeout = ?limit, "response not written within the write timeout, closing connection");
                return;
            }
        }
    }
    let _ = wr.shutdown().await;
}

/// Writes every segment with vectored writes, so large record payloads go out without
/// being copied into one buffer first.
async fn write_segments(wr: &mut OwnedWriteHalf, segments: &[Bytes]) -> std::io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    while idx < segments.len() {
        let slices: Vec<IoSlice<'_>> = std::iter::once(&segments[idx][off..])
            .chain(segments[idx + 1..].iter().map(|s| &s[..]))
            .take(64)
            .map(IoSlice::new)
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while idx < segments.len() && n > 0 {
            let left = segments[idx].len() - off;
            if n >= left {
                n -= left;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
    wr.flush().await
}
