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
//! `max_in_flight_per_connection` Produce requests wait at once. This holds for
//! idempotent and transactional producers too: their next batches are checked against
//! the ones in flight ([`crate::producers`]). Any other request first waits until every
//! earlier one is complete, so it sees their effects.
//!
//! Timeouts: `idle` between frames, `read` from the first byte of a frame to its last
//! (one deadline for the whole frame, so a trickle of bytes cannot hold it open),
//! `write` per response.
//!
//! Memory: the reader takes request memory from the broker's budget
//! ([`RequestBudget`](crate::budget::RequestBudget)) as a frame's bytes arrive, one step
//! ahead of them, never for the announced size at once (the read buffer grows with the
//! lease, not ahead of it); the frame's lease travels with
//! it and is given back once the request has been handled. A frame of 64 KiB or more is
//! read into a buffer from the broker's frame pool
//! ([`FramePool`](crate::frame_pool::FramePool)): a kept one as soon as its size is known
//! if one fits, else one once its lease covers it whole; the pool gets the buffer back
//! when the request's last slice is dropped. The processor starts no new
//! request while the connection's queued responses are over their bound (see
//! [`Outbox`]); the writer counts them off as they are written. Any violation, a
//! malformed frame, an unknown API or an unsupported version closes the connection with
//! a log line.
//!
//! SASL listeners: until the session has authenticated, frames over
//! `sasl.max_receive_size` close the connection (the reader and the processor share an
//! "authenticated" flag for this), and a connection still unauthenticated
//! `sasl.authentication_timeout` after accept is closed, even if it sends nothing. After a
//! SaslHandshake v0 the next frames are raw SASL tokens, not requests: the processor hands
//! them to the [authentication layer](crate::pipeline::authentication) and sends its
//! answers back as raw size-prefixed frames, until the exchange is over. A client that
//! pipelines a request behind its last authentication token may see it refused by the
//! smaller pre-authentication frame limit; Kafka clients wait for the answer first.
//!
//! The connection owns its [`Session`]; every request goes through the broker's
//! [pipeline](crate::pipeline) with it. The loop is generic over the byte stream, so a
//! TLS stream serves exactly like a TCP one. Logs carry a `connection` span (id, peer,
//! listener, client id, principal) and, inside it, a `request` span (API, version,
//! correlation id).

use crate::broker::Broker;
use crate::budget::{Lease, Outbox};
use crate::dispatch::{self, Outcome, Step};
use crate::frame_pool::PooledBuf;
use crate::handlers;
use crate::session::{AuthState, Session};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use kafka_protocol::api::{HeaderPrefix, decode_memory_bound};
use kafka_protocol::frame::{Framed, split_frame};
use kafka_protocol::{ApiKey, DecodeLimits, EncodedFrame};
use std::future::Future;
use std::io::IoSlice;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span, debug, info, info_span, warn};

/// A frame read whole, with the budget it holds and when it was complete. Boxed in the
/// channel: tokio allocates a channel's slots 32 at a time when it is created, so the
/// unboxed 112 bytes would cost every connection 3.5 KiB before its first request.
type Frame = Box<(Bytes, Lease, std::time::Instant)>;

/// Serves one connection until the client leaves, a limit is hit, or shutdown.
pub(crate) async fn serve<S>(
    stream: S,
    session: Session,
    broker: Arc<Broker>,
    stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let span = info_span!(
        "connection",
        id = session.id,
        peer = %session.peer,
        listener = %session.listener.name,
        client_id = Empty,
        principal = %session.principal,
    );
    let conn = span.clone();
    async move {
        let (rd, wr) = tokio::io::split(stream);
        let depth = broker.config.limits.max_in_flight_per_connection;
        let (frames_tx, frames_rx) = mpsc::channel::<Frame>(depth);
        let (resp_tx, resp_rx) = mpsc::channel::<EncodedFrame>(depth);
        broker.pipeline.connected(&session);

        let outbox = Arc::new(Outbox::new(broker.response_memory.clone()));
        let authenticated = Arc::new(AtomicBool::new(session.is_authenticated()));
        let reader = read_frames(
            rd,
            broker.clone(),
            session.peer.ip(),
            session.id,
            frames_tx,
            stop,
            authenticated.clone(),
        );
        let processor = process(
            session,
            conn,
            broker.clone(),
            frames_rx,
            resp_tx,
            outbox.clone(),
            authenticated,
        );
        let writer = write_responses(wr, broker.clone(), resp_rx, outbox);
        let work = async { tokio::join!(processor, writer).0 };
        tokio::pin!(reader, work);
        // Normally the reader ends first (EOF, error, shutdown); the processor then drains
        // the queued requests and the writer sends their responses before the socket
        // closes. When the processor ends first (the connection must close), the reader
        // is dropped with it: a client that keeps its socket open holds nothing.
        let session = tokio::select! {
            biased;
            session = &mut work => session,
            () = &mut reader => work.await,
        };
        broker.pipeline.disconnected(&session);
        debug!("connection closed");
    }
    .instrument(span)
    .await;
}

/// Bytes a connection reads before the size of the next frame is known (they hold no
/// lease: at most this much per connection is outside the budget).
const BOUNDARY_STEP: usize = 4 * 1024;
/// Smallest and largest amount a frame's lease runs ahead of the bytes received: it is
/// [`GROWTH`] - 1 times what has arrived, so a large frame that is really sent needs few
/// grants (and few moves of its buffer, which grows with the lease) while one that stops
/// holds at most [`GROWTH`] times what it sent, or what it sent plus one largest step.
const MIN_STEP: usize = 4 * 1024;
const MAX_STEP: usize = 8 * 1024 * 1024;
/// How many times what has arrived a frame's lease may hold. Each grant moves the
/// buffer (a reallocation that copies what arrived), so the frame's bytes are copied
/// about 1 / (`GROWTH` - 1) times over on top of their read: once over with doubling,
/// a seventh with 8.
const GROWTH: usize = 8;

async fn read_frames<R: AsyncRead>(
    rd: R,
    broker: Arc<Broker>,
    peer: IpAddr,
    id: u64,
    frames: mpsc::Sender<Frame>,
    mut stop: watch::Receiver<bool>,
    authenticated: Arc<AtomicBool>,
) {
    tokio::pin!(rd);
    let limits = &broker.config.limits;
    let timeouts = &broker.config.timeouts;
    let mut buf = BytesMut::with_capacity(BOUNDARY_STEP);
    // Memory held (from the broker-wide budget) for the frame at the front of `buf`, and
    // when that frame must be complete.
    let mut lease: Option<Lease> = None;
    let mut frame_deadline: Option<Instant> = None;
    loop {
        let at_boundary = buf.is_empty();
        let deadline = if at_boundary {
            Instant::now() + timeouts.idle
        } else {
            *frame_deadline.get_or_insert_with(|| Instant::now() + timeouts.read)
        };
        // How much the next read may take.
        let mut room = BOUNDARY_STEP.saturating_sub(buf.len()).max(1);
        if let Some(prefix) = buf.first_chunk::<4>() {
            let size = i32::from_be_bytes(*prefix);
            if size < 0 {
                warn!(size, "negative frame size, closing connection");
                return;
            }
            // i32 to usize: lossless on every target tokio supports.
            let total = size as usize + 4;
            if size as usize > limits.max_frame_size {
                warn!(
                    size,
                    max = limits.max_frame_size,
                    "frame larger than the maximum, closing connection"
                );
                return;
            }
            let max_receive = broker.config.sasl.max_receive_size;
            if size as usize > max_receive && !authenticated.load(Ordering::Acquire) {
                warn!(
                    size,
                    max = max_receive,
                    "frame before SASL authentication larger than sasl.max_receive_size, closing connection"
                );
                return;
            }
            let held = lease.get_or_insert_with(|| broker.request_memory.lease(peer, id, total));
            if buf.len() >= total {
                // Whole: it must be covered whole before it is handed on.
                if !grow(held, total, deadline, &mut stop).await {
                    return;
                }
                let Framed::Frame(frame) = split_frame(&mut buf, limits.max_frame_size) else {
                    // The size was checked above and the frame is complete.
                    return;
                };
                frame_deadline = None;
                if !hand_on(&frames, frame, &mut lease).await {
                    return;
                }
                continue;
            }
            if held.held() <= buf.len() {
                // Take the next step from the budget before reading it.
                if !grow(
                    held,
                    total.min(buf.len() + next_step(buf.len())),
                    deadline,
                    &mut stop,
                )
                .await
                {
                    return;
                }
                // A large frame goes on in a pooled buffer (see `frame_pool`): a kept one
                // as soon as one fits, else a kept or new one once its lease covers it
                // whole; the buffer takes what arrived so far.
                let pool = &broker.frame_pool;
                let pooled = if !pool.pools(total) {
                    None
                } else if held.held() >= total {
                    Some(pool.take(total))
                } else {
                    pool.take_early(total)
                };
                if let Some(mut pooled) = pooled {
                    pooled.vec().extend_from_slice(&buf);
                    buf = BytesMut::new();
                    if !read_pooled(
                        rd.as_mut(),
                        &mut pooled,
                        held,
                        total,
                        deadline,
                        timeouts.read,
                        &mut stop,
                    )
                    .await
                    {
                        return;
                    }
                    frame_deadline = None;
                    if !hand_on(&frames, pooled.freeze().slice(4..), &mut lease).await {
                        return;
                    }
                    continue;
                }
            }
            room = held.held() - buf.len();
            // The buffer grows with the lease, never past it: capacity the allocator
            // hands out may already be resident (reused pages), so reserving the
            // announced size ahead would hold memory the budget does not count.
            buf.reserve(room);
        }
        let read_for = if at_boundary {
            ReadFor::Idle(timeouts.idle)
        } else {
            ReadFor::Frame {
                timeout: timeouts.read,
                buffered: buf.len(),
            }
        };
        if !read_some(rd.as_mut(), &mut buf, room, deadline, read_for, &mut stop).await {
            return;
        }
    }
}

/// What a connection's read is waiting for, for the log line when it gives up.
enum ReadFor {
    /// The next frame's first bytes, within the idle timeout.
    Idle(std::time::Duration),
    /// The rest of a frame, within the read timeout; `buffered` of it arrived.
    Frame {
        timeout: std::time::Duration,
        buffered: usize,
    },
}

/// One read of at most `room` bytes into `buf`, with `deadline` and shutdown. False when
/// the connection must close, with the reason logged: end of stream, a read error,
/// shutdown, or the deadline.
async fn read_some<R: AsyncRead, B: BufMut>(
    rd: Pin<&mut R>,
    buf: &mut B,
    room: usize,
    deadline: Instant,
    read_for: ReadFor,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut limited = rd.take(room as u64);
    let outcome = tokio::select! {
        r = tokio::time::timeout_at(deadline, limited.read_buf(buf)) => r,
        _ = stop.wait_for(|s| *s) => {
            debug!("shutdown: no more requests read from this connection");
            return false;
        }
    };
    match (outcome, read_for) {
        (Ok(Ok(0)), ReadFor::Idle(_)) => false,
        (Ok(Ok(0)), ReadFor::Frame { buffered, .. }) => {
            info!(buffered, "connection closed inside a frame");
            false
        }
        (Ok(Ok(_)), _) => true,
        (Ok(Err(e)), _) => {
            debug!(error = %e, "read failed");
            false
        }
        (Err(_), ReadFor::Idle(timeout)) => {
            info!(?timeout, "idle timeout, closing connection");
            false
        }
        (Err(_), ReadFor::Frame { timeout, buffered }) => {
            warn!(
                ?timeout,
                buffered, "frame not completed within the read timeout, closing connection"
            );
            false
        }
    }
}

/// Reads the rest of a `total`-byte frame into `pooled` (never more: the next frame's
/// bytes stay in the socket), growing `lease` ahead of the bytes as the connection's
/// own buffer would (see [`next_step`]), with the frame's deadline. Once the lease
/// covers the frame the buffer stops counting against the pool's bound. False when the
/// connection must close (the reason is logged).
async fn read_pooled<R: AsyncRead>(
    mut rd: std::pin::Pin<&mut R>,
    pooled: &mut PooledBuf,
    lease: &mut Lease,
    total: usize,
    deadline: Instant,
    timeout: std::time::Duration,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    while pooled.len() < total {
        if lease.held() <= pooled.len()
            && !grow(
                lease,
                total.min(pooled.len() + next_step(pooled.len())),
                deadline,
                stop,
            )
            .await
        {
            return false;
        }
        if lease.held() >= total {
            pooled.covered();
        }
        // The lease never passes the frame, and the buffer holds at least the frame.
        let room = lease.held().min(pooled.capacity()) - pooled.len();
        let read_for = ReadFor::Frame {
            timeout,
            buffered: pooled.len(),
        };
        if !read_some(rd.as_mut(), pooled.vec(), room, deadline, read_for, stop).await {
            return false;
        }
    }
    pooled.covered();
    true
}

/// Hands a whole `frame` on to the processor with its lease (taken from `lease`). False
/// when the processor is gone.
async fn hand_on(frames: &mpsc::Sender<Frame>, frame: Bytes, lease: &mut Option<Lease>) -> bool {
    let Some(held) = lease.take() else {
        return false;
    };
    frames
        .send(Box::new((frame, held, std::time::Instant::now())))
        .await
        .is_ok()
}

/// How far a frame's lease runs ahead of the `arrived` bytes at its next step.
fn next_step(arrived: usize) -> usize {
    arrived.saturating_mul(GROWTH - 1).clamp(MIN_STEP, MAX_STEP)
}

/// Grows `lease` to `target` bytes, waiting for room in the request budget until the
/// frame's read deadline. `false` when the connection must close (deadline, shutdown, or
/// more than the frame may ever hold).
async fn grow(
    lease: &mut Lease,
    target: usize,
    deadline: Instant,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        r = tokio::time::timeout_at(deadline, lease.grow_to(target)) => match r {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                warn!(error = %e, "request memory refused, closing connection");
                false
            }
            Err(_) => {
                warn!(held = lease.held(), wanted = target, "no request memory for the frame within the read timeout, closing connection");
                false
            }
        },
        _ = stop.wait_for(|s| *s) => false,
    }
}

/// Decodes `frame` with the memory its lists may take reserved on `lease` first.
///
/// [`decode_memory_bound`] is the most a request of that API, version and size can take,
/// for whatever its bytes hold; reserving it for every request would make an ordinary
/// Produce reserve several times its size (its records stay slices of the frame, but a
/// frame of the same size packed with empty topic entries would not). So the first
/// attempt reserves a share of it: four times the first MiB of the frame, an eighth of
/// the rest, and 16 KiB; and decodes with that as its heap limit, which ordinary requests
/// fit (a Fetch of thousands of partitions needs about 2.5 times its frame, a Produce
/// almost nothing). A request whose lists need more, the shape of an attack, is decoded
/// again after reserving the full bound, waiting for it like any other request memory,
/// or is refused when the bound is more than the connection may ever hold. Decoding never
/// allocates more than what is reserved.
async fn decode_reserved(
    broker: &Broker,
    frame: Bytes,
    received: std::time::Instant,
    lease: &mut Lease,
) -> Result<crate::pipeline::Request, dispatch::Rejected> {
    let limits = &broker.config.limits;
    let base = DecodeLimits {
        max_entries: limits.max_decode_entries,
        max_heap_bytes: usize::MAX,
    };
    let full = match HeaderPrefix::peek(&frame) {
        Ok(p) => decode_memory_bound(
            ApiKey::from_i16(p.api_key),
            p.api_version,
            frame.len(),
            &base,
        ),
        // Refused by the decode below without allocating.
        Err(_) => 0,
    };
    let len = frame.len();
    let first = full.min(
        len.min(DECODE_FIRST_RESERVE_SMALL)
            .saturating_mul(DECODE_FIRST_RESERVE_FACTOR)
            .saturating_add(len / 8)
            .saturating_add(DECODE_FIRST_RESERVE_SLACK),
    );
    if full <= DECODE_UNRESERVED {
        // Small enough to be covered by the frame's own reservation and its read step.
        let limits = DecodeLimits {
            max_heap_bytes: DECODE_UNRESERVED,
            ..base
        };
        return dispatch::decode(frame, received, &limits);
    }
    let mut reserved = 0;
    for step in [first, full] {
        if step < reserved || (step == reserved && reserved > 0) {
            continue;
        }
        let target = lease.held().saturating_add(step - reserved);
        match tokio::time::timeout(broker.config.timeouts.read, lease.grow_to(target)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(error = %e, "no request memory to decode the request, closing connection");
                return Err(dispatch::Rejected::close(None, -1, "decode memory refused"));
            }
            Err(_) => {
                warn!(
                    wanted = step,
                    "no request memory to decode the request within the read timeout, closing connection"
                );
                return Err(dispatch::Rejected::close(None, -1, "decode memory timeout"));
            }
        }
        reserved = step;
        let limits = DecodeLimits {
            max_heap_bytes: if step == full { usize::MAX } else { step },
            ..base
        };
        match dispatch::decode(frame.clone(), received, &limits) {
            Err(r) if r.reason == dispatch::NEEDS_MORE_MEMORY => {
                debug!(
                    reserved = step,
                    full, "request lists need more memory; reserving the full bound"
                );
            }
            other => return other,
        }
    }
    Err(dispatch::Rejected::close(None, -1, "decode memory"))
}

/// The first decode attempt reserves `DECODE_FIRST_RESERVE_FACTOR` times the first
/// `DECODE_FIRST_RESERVE_SMALL` bytes of the frame, an eighth of the rest and
/// `DECODE_FIRST_RESERVE_SLACK` for the request's lists (see [`decode_reserved`]).
const DECODE_FIRST_RESERVE_FACTOR: usize = 4;
const DECODE_FIRST_RESERVE_SMALL: usize = 1024 * 1024;
const DECODE_FIRST_RESERVE_SLACK: usize = 16 * 1024;
/// Decode memory not reserved separately: requests whose lists can never take more than
/// this (ApiVersions, most header-only requests) decode under the frame's reservation.
const DECODE_UNRESERVED: usize = 4 * 1024;

/// Started requests waiting for their outcome, oldest first.
type Waiting<'a> = FuturesOrdered<Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>>;

/// Runs the connection's requests through the pipeline in arrival order; returns the
/// session as it ended.
async fn process(
    session: Session,
    conn: Span,
    broker: Arc<Broker>,
    mut frames: mpsc::Receiver<Frame>,
    responses: mpsc::Sender<EncodedFrame>,
    outbox: Arc<Outbox>,
    authenticated: Arc<AtomicBool>,
) -> Session {
    let responses = &Responses {
        tx: responses,
        outbox,
    };
    let depth = broker.config.limits.max_in_flight_per_connection.max(1);
    let mut session = Arc::new(session);
    // Requests started and waiting for their outcome (Produce whose appends hold their
    // place and wait for the store), oldest first; their outcomes are delivered in order.
    let mut waiting: Waiting<'_> = FuturesOrdered::new();
    loop {
        // Back-pressure: while too many response bytes wait for this client to read
        // them, no new request is started (the started ones are still answered).
        let room = responses.outbox.has_room();
        // A SASL connection must authenticate within its timeout, sending or not.
        let pending = matches!(session.auth, AuthState::Pending);
        let auth_deadline =
            Instant::from_std(session.opened) + broker.config.sasl.authentication_timeout;
        let (frame, permit, received) = tokio::select! {
            biased;
            () = tokio::time::sleep_until(auth_deadline), if pending => {
                info!(
                    timeout = ?broker.config.sasl.authentication_timeout,
                    "not authenticated within the authentication timeout, closing connection"
                );
                break;
            }
            Some(outcome) = waiting.next(), if !waiting.is_empty() => {
                if !deliver(outcome, responses).await {
                    break;
                }
                continue;
            }
            () = responses.outbox.room(), if !room => continue,
            next = frames.recv(), if waiting.len() < depth && room => match next {
                Some(next) => *next,
                None => {
                    // The reader has stopped: the requests still waiting are answered.
                    finish(&mut waiting, responses).await;
                    break;
                }
            },
        };
        if session.expects_raw_token()
            && let Some(auth) = &broker.authentication
        {
            // A raw SASL token of the v0 flow, not a request.
            if !finish(&mut waiting, responses).await {
                break;
            }
            let before = session.principal.clone();
            let answer = auth.raw_token(Arc::make_mut(&mut session), &frame).await;
            drop(permit);
            if session.is_authenticated() {
                authenticated.store(true, Ordering::Release);
            }
            if before != session.principal {
                conn.record("principal", tracing::field::display(&session.principal));
            }
            let Some(answer) = answer else {
                break;
            };
            if !deliver(Outcome::Respond(raw_frame(answer)), responses).await {
                break;
            }
            continue;
        }
        // `permit` holds the frame's request memory until the request is handled; the
        // decoded form's lists are reserved from the same budget before decoding.
        let mut permit = permit;
        let request = match decode_reserved(&broker, frame, received, &mut permit).await {
            Ok(r) => r,
            Err(rejected) => {
                broker
                    .pipeline
                    .rejected(&session, rejected.api, rejected.version, rejected.reason);
                if !finish(&mut waiting, responses).await
                    || !deliver(rejected.outcome, responses).await
                {
                    break;
                }
                continue;
            }
        };
        if !handlers::overlaps(&request.body) && !finish(&mut waiting, responses).await {
            break;
        }
        let span = info_span!(
            parent: &conn,
            "request",
            api = request.api.name(),
            version = request.version,
            correlation_id = request.correlation_id,
        );
        let before = (session.client_id.clone(), session.principal.clone());
        // Boxed: awaited inline, the largest handler's state would be part of every
        // connection's task, idle or not (about 20 KiB per connection). Earlier requests
        // go on meanwhile: a start may wait for what one of them holds (an idempotent
        // append's partition lock until it is confirmed).
        let start =
            Box::pin(dispatch::start(&broker, &mut session, request).instrument(span.clone()));
        let Some(step) = alongside(start, &mut waiting, responses).await else {
            break;
        };
        if !Arc::ptr_eq(&before.0, &session.client_id) {
            conn.record("client_id", tracing::field::display(&*session.client_id));
        }
        if before.1 != session.principal {
            conn.record("principal", tracing::field::display(&session.principal));
        }
        if session.is_authenticated() {
            authenticated.store(true, Ordering::Release);
        }
        match step {
            Step::Done(outcome) => {
                // The request's bytes are released once it is handled (payloads the
                // store keeps are its own memory, under its own limits).
                drop(permit);
                if !finish(&mut waiting, responses).await || !deliver(outcome, responses).await {
                    break;
                }
            }
            Step::Later { outcome } => {
                waiting.push_back(Box::pin(
                    async move {
                        let outcome = outcome.await;
                        drop(permit);
                        outcome
                    }
                    .instrument(span),
                ));
            }
        }
    }
    drop(waiting);
    Arc::unwrap_or_clone(session)
}

/// A raw SASL token as a size-prefixed frame.
fn raw_frame(token: Vec<u8>) -> EncodedFrame {
    let mut framed = Vec::with_capacity(4 + token.len());
    // Tokens are bounded by `max_token_bytes` and the mechanisms' own sizes, far below 2 GiB.
    framed.extend_from_slice(&(i32::try_from(token.len()).unwrap_or(i32::MAX)).to_be_bytes());
    framed.extend_from_slice(&token);
    EncodedFrame {
        segments: vec![Bytes::from(framed)],
    }
}

/// Awaits `start` while the requests started before it complete and their outcomes are
/// delivered, in order; `None` when the connection must close.
async fn alongside<T>(
    start: impl Future<Output = T>,
    waiting: &mut Waiting<'_>,
    responses: &Responses,
) -> Option<T> {
    tokio::pin!(start);
    loop {
        tokio::select! {
            biased;
            step = &mut start => return Some(step),
            Some(outcome) = waiting.next(), if !waiting.is_empty() => {
                if !deliver(outcome, responses).await {
                    return None;
                }
            }
        }
    }
}

/// Waits for every started request and delivers its outcome, in order; `false` when the
/// connection must close.
async fn finish(waiting: &mut Waiting<'_>, responses: &Responses) -> bool {
    while let Some(outcome) = waiting.next().await {
        if !deliver(outcome, responses).await {
            return false;
        }
    }
    true
}

/// The way to the writer, and the count of what waits there.
struct Responses {
    tx: mpsc::Sender<EncodedFrame>,
    outbox: Arc<Outbox>,
}

/// Hands a response to the writer; `false` when the connection must close.
async fn deliver(outcome: Outcome, responses: &Responses) -> bool {
    match outcome {
        Outcome::Respond(r) => {
            responses.outbox.push(r.len());
            responses.tx.send(r).await.is_ok()
        }
        Outcome::RespondThenClose(r) => {
            responses.outbox.push(r.len());
            responses.outbox.close_after_last();
            let _ = responses.tx.send(r).await;
            false
        }
        Outcome::NoResponse => true,
        Outcome::Close => false,
    }
}

async fn write_responses<W: AsyncWrite>(
    wr: W,
    broker: Arc<Broker>,
    mut responses: mpsc::Receiver<EncodedFrame>,
    outbox: Arc<Outbox>,
) {
    // However the writer ends, the processor must not wait for it to drain any more.
    let _closed = OnDrop(|| outbox.close());
    tokio::pin!(wr);
    let limit = broker.config.timeouts.write;
    while let Some(frame) = responses.recv().await {
        let written =
            tokio::time::timeout(limit, write_segments(wr.as_mut(), &frame.segments)).await;
        outbox.sent(frame.len());
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                debug!(error = %e, "write failed");
                return;
            }
            Err(_) => {
                warn!(timeout = ?limit, "response not written within the write timeout, closing connection");
                return;
            }
        }
    }
    // An answer followed by a close: give the client time to read the answer before the
    // end of the connection reaches it (a client may drop data that arrives with the
    // close). Bounded by the setting; the reader is gone, so nothing more is read.
    let linger = broker.config.timeouts.close_linger;
    if outbox.lingers() && !linger.is_zero() {
        let _ = wr.flush().await;
        tokio::time::sleep(linger).await;
    }
    let _ = wr.shutdown().await;
}

/// Runs a closure when dropped.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Writes every segment with vectored writes, so large record payloads go out without
/// being copied into one buffer first.
async fn write_segments<W: AsyncWrite + ?Sized>(
    mut wr: Pin<&mut W>,
    segments: &[Bytes],
) -> std::io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    while idx < segments.len() {
        let slices: Vec<IoSlice<'_>> = std::iter::once(&segments[idx][off..])
            .chain(segments[idx + 1..].iter().map(|s| &s[..]))
            .take(64)
            .map(IoSlice::new)
            .collect();
        let mut n = wr.as_mut().write_vectored(&slices).await?;
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
