//! Iggy `PollMessages` answers read straight into Kafka records.
//!
//! The SDK's `poll_messages` decodes an answer into one `IggyMessage` per message (its
//! header, a payload slice and a user-headers slice) and the mapping then reads each
//! message into a [`MappedRecord`]. [`decode_poll`] walks the answer once instead: each
//! message's user headers are scanned where they lie in the answer and only what the
//! record keeps (its value, key and header slices) is cut from it, so a polled message
//! costs no intermediate message, no user-headers slice and no second pass.
//!
//! The layout is the one the SDK reads (`PolledMessages::from_bytes` of
//! `iggy_common`): a 16-byte prefix (partition id `u32`, current offset `u64`, message
//! count `u32`, little-endian), then batches of a 256-byte header
//! ([`BatchHeader`]) and message frames of a 48-byte header ([`BatchMessageHeader`]),
//! the payload and the user headers. Offsets and origin timestamps are the batch's
//! bases plus each frame's deltas. Every length is checked against the answer: a
//! malformed answer is an error, never a panic or a read past its end, and the message
//! count it claims sizes nothing.
//!
//! A Fetch read takes its polls through [`decode_poll_items`]: a producer batch the
//! answer holds whole goes from the answer straight into the Kafka batch the read
//! returns ([`WholeBatch`]), with no record per message; the rest are records as
//! [`decode_poll`] reads them. The first messages of a batch the answer ends inside are
//! kept ([`Partial`]), and [`decode_poll_items_with`] finishes the batch from the next
//! answer, which the read polls from the message after them: Iggy sends each message
//! once.
//!
//! Every poll the bridge makes is sent by `poll_answer`. Readers that need the SDK's
//! messages (their ids, raw payloads) use `poll_checked`, which refuses an answer
//! claiming more messages than it can hold before the SDK's decode reserves room for
//! them.

use crate::connection::signed_in_request;
use crate::convert;
use crate::mapping::{self, BatchFrame, MappedRecord, MappingError};
use bytes::{BufMut, Bytes, BytesMut};
use iggy::prelude::{
    Consumer, Identifier, IggyClient, IggyError, IggyMessage, PolledMessages, PollingStrategy,
};
use iggy_binary_protocol::WireEncode;
use iggy_binary_protocol::batch::{
    BATCH_HEADER_SIZE, BATCH_MESSAGE_HEADER_SIZE, BatchHeader, BatchMessageHeader,
};
use iggy_binary_protocol::codes::POLL_MESSAGES_CODE;
use iggy_binary_protocol::requests::messages::PollMessagesRequest;
use iggy_common::IggyMessageHeader;
use iggy_common::wire_conversions::{
    consumer_to_wire, identifier_to_wire, polling_strategy_to_wire,
};
use kafka_records::BatchWriter;

/// Bytes before the first batch of a poll's answer.
pub const POLL_PREFIX_LEN: usize = 16;

/// A decoded poll: its records ([`decode_poll`]), or its records and whole batches
/// ([`decode_poll_items`]).
#[derive(Debug, Default)]
pub struct Polled<T = MappedRecord> {
    /// Iggy's current offset of the partition (that of its last message) as the poll saw
    /// it.
    pub current_offset: u64,
    /// What the answer holds at or after the offset asked for, in offset order.
    pub records: Vec<T>,
    /// Messages in the answer (including any before the offset asked for).
    pub messages: usize,
    /// Payload and user-header bytes of those messages.
    pub data_bytes: usize,
    /// The first messages of a producer batch the answer ended inside, after the
    /// records ([`decode_poll_items_with`]).
    pub partial: Option<Partial>,
}

/// The first messages of a producer batch that a read's poll answer ended inside,
/// after other items, kept where they lie in that answer. The next poll, from
/// [`Partial::end`], asks Iggy only for the rest, and [`decode_poll_items_with`]
/// finishes the batch from both answers. Not used (the read went elsewhere, or its
/// read-ahead was dropped), nothing is lost: the read's items end before the batch, so
/// a poll from its first record gets it whole.
#[derive(Debug, Clone)]
pub struct Partial {
    /// The answer the messages lie in (kept whole: it is one allocation).
    answer: Bytes,
    /// The messages, from the batch's first; never empty.
    messages: Vec<Message>,
    /// Offset of the batch's first record.
    head: u64,
    /// The batch's record count, more than `messages` holds.
    count: usize,
}

impl Partial {
    /// Offset of the batch's first record: where the read's items end.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Offset after the last message held: where the next poll starts.
    pub fn end(&self) -> u64 {
        self.head.saturating_add(self.messages.len() as u64)
    }

    /// Messages of the batch still to poll.
    pub fn missing(&self) -> usize {
        self.count.saturating_sub(self.messages.len())
    }

    /// Bytes it keeps in memory: the whole answer the messages lie in.
    pub fn retained_bytes(&self) -> usize {
        self.answer.len()
    }

    /// Payload and user-header bytes of the messages it holds.
    pub fn data_bytes(&self) -> usize {
        self.messages
            .iter()
            .map(|m| m.headers_end - m.payload_start)
            .sum()
    }
}

/// Reads a `PollMessages` answer. Messages before `from` (an answer may start earlier
/// than the offset asked for) are counted but not returned.
pub fn decode_poll(answer: Bytes, from: u64) -> Result<Polled, MappingError> {
    walk(&answer, from, |m| record_at(&answer, &m))
}

/// What a read takes from a poll: a record, or a producer's whole batch already
/// written as its Kafka batch.
#[derive(Debug)]
pub enum Item {
    /// A record, for the read to put into a batch.
    Record(MappedRecord),
    /// A producer batch that the answer held whole.
    Batch(WholeBatch),
}

/// A producer batch read back whole from one poll answer and written as the Kafka batch
/// a read returns for it (the bytes [`mapping::encode_run`] gives for its records).
#[derive(Debug, Clone)]
pub struct WholeBatch {
    /// Offset of its first record.
    pub base_offset: u64,
    /// Offset of its last record.
    pub last_offset: u64,
    /// The Kafka batch, at `base_offset`.
    pub bytes: Bytes,
}

impl WholeBatch {
    /// How many records it holds (offsets are consecutive within it).
    pub fn record_count(&self) -> Option<u32> {
        self.last_offset
            .checked_sub(self.base_offset)
            .and_then(|d| d.checked_add(1))
            .and_then(|n| u32::try_from(n).ok())
    }
}

impl Item {
    /// Offset of the (first) record.
    pub fn offset(&self) -> u64 {
        match self {
            Item::Record(m) => m.offset,
            Item::Batch(b) => b.base_offset,
        }
    }

    /// Offset of the last record.
    pub fn last_offset(&self) -> u64 {
        match self {
            Item::Record(m) => m.offset,
            Item::Batch(b) => b.last_offset,
        }
    }
}

/// [`decode_poll`] for a read: a producer batch whose records the answer holds whole
/// (from its first, stored in native form, uncompressed, not a control batch) is
/// written straight from the answer into its Kafka batch, without a [`MappedRecord`]
/// per record; every other message is a record, as [`decode_poll`] reads it. The batch
/// is byte for byte what the read would encode from those records.
///
/// An answer that ends inside such a batch, after other items, ends before it instead:
/// the next poll, from the offset after the last item, gets it whole. The batch's
/// messages in this answer come back as [`Polled::partial`], for
/// [`decode_poll_items_with`] to finish from the next answer.
pub fn decode_poll_items(answer: Bytes, from: u64) -> Result<Polled<Item>, MappingError> {
    decode_poll_items_with(answer, from, None)
}

/// [`decode_poll_items`] of an answer polled from `from`, after `partial` (a batch the
/// answer before ended inside) when `from` is its [`Partial::end`]: the items start
/// with that batch, written whole from both answers, or, when this answer does not
/// finish it in that form, with its messages as records. A `partial` that does not end
/// at `from` is not used.
pub fn decode_poll_items_with(
    answer: Bytes,
    from: u64,
    partial: Option<Partial>,
) -> Result<Polled<Item>, MappingError> {
    let walked = walk(&answer, from, Ok)?;
    let messages = walked.records;
    let mut items = Vec::new();
    let mut scratch = BytesMut::new();
    let mut i = 0;
    if let Some(p) = partial.filter(|p| p.end() == from) {
        let rest = messages.get(..p.missing());
        match rest.and_then(|rest| finish(&p, &answer, rest, &mut scratch)) {
            Some(batch) => {
                items.push(Item::Batch(batch));
                i = p.missing();
            }
            None => {
                for m in &p.messages {
                    items.push(Item::Record(record_at(&p.answer, m)?));
                }
            }
        }
    }
    let mut partial = None;
    while let Some(m) = messages.get(i) {
        let record = record_at(&answer, m)?;
        let head = record.offset_delta == Some(0)
            && !record.envelope
            && record
                .batch
                .as_deref()
                .is_some_and(|f| f.attributes & 0x07 == 0 && !f.is_control());
        if head {
            match whole_batch(&answer, &messages[i..], &mut scratch) {
                Whole::Written(batch, used) => {
                    items.push(Item::Batch(batch));
                    i += used;
                    continue;
                }
                Whole::Cut(count) if !items.is_empty() => {
                    partial = Some(Partial {
                        answer: answer.clone(),
                        messages: messages[i..].to_vec(),
                        head: m.offset,
                        count,
                    });
                    break;
                }
                Whole::Cut(_) | Whole::No => {}
            }
        }
        items.push(Item::Record(record));
        i += 1;
    }
    Ok(Polled {
        current_offset: walked.current_offset,
        records: items,
        messages: walked.messages,
        data_bytes: walked.data_bytes,
        partial,
    })
}

/// The batch `p` holds the first messages of, finished with `rest` (the messages after
/// them, from the next answer) and written whole; `None` when they are not that
/// batch's rest in the form [`write_whole`] writes.
fn finish(
    p: &Partial,
    answer: &Bytes,
    rest: &[Message],
    scratch: &mut BytesMut,
) -> Option<WholeBatch> {
    let (first, frame) = batch_head(&p.answer, p.messages.first()?)?;
    write_whole(
        &[(&p.answer, &p.messages), (answer, rest)],
        first,
        &frame,
        scratch,
    )
}

/// Where one message lies in an answer.
#[derive(Debug, Clone, Copy)]
struct Message {
    /// Its 48-byte frame header.
    frame_at: usize,
    offset: u64,
    origin: u64,
    /// Its batch's base timestamp (the SDK's `timestamp` of the message).
    timestamp: u64,
    payload_start: usize,
    payload_end: usize,
    headers_end: usize,
}

/// Walks an answer's messages, checking every length, and keeps what `read` makes of
/// each message at or after `from` (sized for as many messages as the answer can hold,
/// at most its claimed count).
fn walk<T>(
    answer: &Bytes,
    from: u64,
    mut read: impl FnMut(Message) -> Result<T, MappingError>,
) -> Result<Polled<T>, MappingError> {
    let bad = |what: &str| MappingError::BadFrame(format!("poll answer: {what}"));
    let prefix = answer
        .get(..POLL_PREFIX_LEN)
        .ok_or_else(|| bad("shorter than its prefix"))?;
    let current_offset = u64::from_le_bytes(
        prefix[4..12]
            .try_into()
            .map_err(|_| bad("current offset"))?,
    );
    let (claimed, fits) = claimed_and_room(answer).ok_or_else(|| bad("count"))?;
    // The claimed count sizes the output only as far as the answer can hold messages.
    let mut walked = Polled {
        current_offset,
        records: Vec::with_capacity(claimed.min(fits)),
        messages: 0,
        data_bytes: 0,
        partial: None,
    };
    let mut position = POLL_PREFIX_LEN;
    while position < answer.len() {
        let batch = BatchHeader::decode(&answer[position..])
            .map_err(|e| bad(&format!("batch header at {position}: {e}")))?;
        let batch_end = usize::try_from(batch.batch_length)
            .ok()
            .and_then(|len| position.checked_add(len))
            .filter(|end| *end <= answer.len())
            .ok_or_else(|| bad(&format!("batch at {position} runs past the answer")))?;
        let mut cursor = position + BATCH_HEADER_SIZE;
        while cursor < batch_end {
            let frame = MessageFrame::at(&answer[cursor..batch_end])
                .ok_or_else(|| bad(&format!("message frame at {cursor}")))?;
            let payload_start = cursor + BATCH_MESSAGE_HEADER_SIZE;
            let ends = payload_start
                .checked_add(frame.payload_length as usize)
                .and_then(|p| Some((p, p.checked_add(frame.user_headers_length as usize)?)))
                .filter(|(_, h)| *h <= batch_end);
            let Some((payload_end, headers_end)) = ends else {
                return Err(bad(&format!("message at {cursor} runs past its batch")));
            };
            let frame_at = cursor;
            cursor = headers_end;
            walked.messages += 1;
            walked.data_bytes += headers_end - payload_start;
            let offset = batch
                .base_offset
                .wrapping_add(u64::from(frame.offset_delta));
            if offset < from {
                continue;
            }
            walked.records.push(read(Message {
                frame_at,
                offset,
                origin: batch
                    .origin_timestamp
                    .wrapping_add(u64::from(frame.timestamp_delta)),
                timestamp: batch.base_timestamp,
                payload_start,
                payload_end,
                headers_end,
            })?);
        }
        position = batch_end;
    }
    Ok(walked)
}

/// What the walk reads of a message's 48-byte frame header (checksum `u64`, id `u128`,
/// offset delta, timestamp delta, user-headers length and payload length `u32`, reserved
/// `u64`, little-endian): the SDK's `BatchMessageHeader::decode` without the checksum and
/// id, which only the map-based reader needs.
struct MessageFrame {
    offset_delta: u32,
    timestamp_delta: u32,
    user_headers_length: u32,
    payload_length: u32,
}

impl MessageFrame {
    /// The frame at the start of `bytes`; `None` when `bytes` is shorter than a frame
    /// header or its reserved bytes are not zero (the SDK's decode refuses those too).
    fn at(bytes: &[u8]) -> Option<MessageFrame> {
        let h: &[u8; BATCH_MESSAGE_HEADER_SIZE] =
            bytes.get(..BATCH_MESSAGE_HEADER_SIZE)?.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        (h[40..48] == [0u8; 8]).then(|| MessageFrame {
            offset_delta: u32_at(24),
            timestamp_delta: u32_at(28),
            user_headers_length: u32_at(32),
            payload_length: u32_at(36),
        })
    }
}

/// The record of one message.
fn record_at(answer: &Bytes, m: &Message) -> Result<MappedRecord, MappingError> {
    let payload = answer.slice(m.payload_start..m.payload_end);
    let record = if m.headers_end == m.payload_end {
        mapping::from_scanned(m.offset, m.origin, None, payload, Default::default())
    } else {
        match mapping::scan_headers(answer, m.payload_end, m.headers_end) {
            Some(scanned) => {
                let frame = scanned.frame.and_then(|(s, e)| answer.get(s..e));
                mapping::from_scanned(m.offset, m.origin, frame, payload, scanned)
            }
            // Headers of another shape: through the SDK's header map.
            None => {
                let frame = BatchMessageHeader::decode(&answer[m.frame_at..m.headers_end])
                    .map_err(|e| MappingError::BadFrame(format!("message frame: {e}")))?;
                mapping::from_message_mapped(&IggyMessage {
                    header: IggyMessageHeader {
                        checksum: frame.checksum,
                        id: frame.id,
                        offset: m.offset,
                        timestamp: m.timestamp,
                        origin_timestamp: m.origin,
                        user_headers_length: frame.user_headers_length,
                        payload_length: frame.payload_length,
                        reserved: 0,
                    },
                    payload,
                    user_headers: Some(answer.slice(m.payload_end..m.headers_end)),
                })
            }
        }
    };
    record.map_err(|e| MappingError::BadFrame(format!("offset {}: {e}", m.offset)))
}

/// What [`whole_batch`] made of the messages from a batch's first.
enum Whole {
    /// The batch, and how many messages it took.
    Written(WholeBatch, usize),
    /// The answer ends before the batch does; its record count.
    Cut(usize),
    /// Not a batch this path writes (see [`decode_poll_items`]), or not whole in that
    /// form: its messages are read as records.
    No,
}

/// The producer batch that starts at `messages[0]`, written as its Kafka batch (see
/// [`Whole`]). `scratch` is reused between batches for the bytes.
fn whole_batch(answer: &Bytes, messages: &[Message], scratch: &mut BytesMut) -> Whole {
    let Some((first, frame)) = messages.first().and_then(|head| batch_head(answer, head)) else {
        return Whole::No;
    };
    let Some(count) = usize::try_from(frame.record_count).ok().filter(|n| *n >= 1) else {
        return Whole::No;
    };
    let Some(run) = messages.get(..count) else {
        return Whole::Cut(count);
    };
    match write_whole(&[(answer, run)], first, &frame, scratch) {
        Some(batch) => Whole::Written(batch, count),
        None => Whole::No,
    }
}

/// The headers and batch frame of `head` when it starts a batch this path writes.
fn batch_head(answer: &Bytes, head: &Message) -> Option<(mapping::PlainHeaders, BatchFrame)> {
    let headers = mapping::plain_headers(answer, head.payload_end, head.headers_end)?;
    let (delta, frame, envelope) = headers.frame(answer)?;
    let frame = frame?;
    if delta != 0 || envelope || frame.attributes & 0x07 != 0 || frame.is_control() {
        return None;
    }
    Some((headers, frame))
}

/// The batch of `runs` (its messages from its first, all there, in one answer or two:
/// each run with the answer it lies in; `first` and `frame` are the first's headers and
/// batch frame) written as its Kafka batch; `None` when one of them is not in the form
/// this path writes.
fn write_whole(
    runs: &[(&Bytes, &[Message])],
    first: mapping::PlainHeaders,
    frame: &BatchFrame,
    scratch: &mut BytesMut,
) -> Option<WholeBatch> {
    // A batch given up half-written left its bytes here.
    scratch.clear();
    let head = *runs.first()?.1.first()?;
    let base_offset = i64::try_from(head.offset).ok()?;
    let options = frame.options(base_offset).ok()?;
    let messages = || {
        runs.iter()
            .flat_map(|(answer, run)| run.iter().map(move |m| (*answer, m)))
    };
    let size: usize = messages()
        .map(|(_, m)| m.headers_end - m.payload_start + 16)
        .sum();
    scratch.reserve(kafka_records::BATCH_HEADER_LEN + size);
    let mut writer = BatchWriter::new(&options, scratch).ok()?;
    let mut last = head.offset;
    for (i, (answer, m)) in messages().enumerate() {
        let headers = if i == 0 {
            first
        } else {
            let headers = mapping::plain_headers(answer, m.payload_end, m.headers_end)?;
            match headers.frame(answer)? {
                (d, None, false) if usize::try_from(d).ok() == Some(i) => {}
                _ => return None,
            }
            headers
        };
        if m.offset != head.offset.checked_add(i as u64)? {
            return None;
        }
        let timestamp = headers
            .timestamp
            .unwrap_or_else(|| convert::kafka_i64(m.origin / 1000));
        let key = headers.key.and_then(|(s, e)| answer.get(s..e));
        let value = answer.get(m.payload_start..m.payload_end);
        // The producer's headers, walked from the first (none: from the end).
        let wire = answer.get(..m.headers_end)?;
        let from = headers.producer_from.unwrap_or(m.headers_end);
        writer
            .record(
                timestamp,
                key,
                value,
                mapping::ProducerHeaders::new(wire, from),
            )
            .ok()?;
        last = m.offset;
    }
    writer.finish(frame.crc).ok()?;
    let bytes = scratch.split().freeze();
    Some(WholeBatch {
        base_offset: head.offset,
        last_offset: last,
        bytes,
    })
}

/// Polls up to `count` (at least one) messages of one partition without a stored
/// consumer offset, as the SDK's `poll_messages` asks for them (consumer 0, no
/// auto-commit, same request, sign-in check and transport), and returns Iggy's answer
/// undecoded, for [`decode_poll`], [`decode_poll_items`] or [`poll_checked`].
pub(crate) async fn poll_answer(
    session: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    strategy: &PollingStrategy,
    count: u32,
) -> Result<Bytes, IggyError> {
    let request = PollMessagesRequest {
        consumer: consumer_to_wire(&Consumer::new(Identifier::numeric(0)?))?,
        stream_id: identifier_to_wire(stream)?,
        topic_id: identifier_to_wire(topic)?,
        partition_id: Some(partition),
        strategy: polling_strategy_to_wire(strategy),
        count: count.max(1),
        auto_commit: false,
    };
    signed_in_request(session, POLL_MESSAGES_CODE, request.to_bytes()).await
}

/// [`poll_answer`] decoded by the SDK into its messages, for readers that need them as
/// such (their ids, their raw payloads). The SDK's decode reserves room for the message
/// count an answer claims before reading it, so an answer claiming more than it can
/// hold ([`claims_more_than_it_holds`]) is refused first, as `InvalidMessagesCount`.
pub(crate) async fn poll_checked(
    session: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
    partition: u32,
    strategy: &PollingStrategy,
    count: u32,
) -> Result<PolledMessages, IggyError> {
    let answer = poll_answer(session, stream, topic, partition, strategy, count).await?;
    if claims_more_than_it_holds(&answer) {
        return Err(IggyError::InvalidMessagesCount);
    }
    PolledMessages::from_bytes(answer)
}

/// Whether a poll answer claims more messages than its bytes can hold (each takes at
/// least a message frame header) or is shorter than its prefix: such an answer is not
/// handed to a decode that reserves room for the claimed count.
pub fn claims_more_than_it_holds(answer: &[u8]) -> bool {
    claimed_and_room(answer).is_none_or(|(claimed, room)| claimed > room)
}

/// The message count an answer claims, and the most messages its bytes can hold (each
/// takes at least a message frame header); `None` when it is shorter than its prefix.
fn claimed_and_room(answer: &[u8]) -> Option<(usize, usize)> {
    let count = answer.get(12..POLL_PREFIX_LEN)?;
    let claimed = u32::from_le_bytes([count[0], count[1], count[2], count[3]]) as usize;
    Some((
        claimed,
        (answer.len() - POLL_PREFIX_LEN) / BATCH_MESSAGE_HEADER_SIZE,
    ))
}

/// Writes a poll answer as Iggy does, one batch per slice of `batches`: each message's
/// offset and origin timestamp are its header's, stored as deltas from the batch's first
/// offset and its smallest origin timestamp. For tests and benchmarks of readers of
/// answers; offsets within a batch must not go down and deltas must fit in `u32`
/// (larger ones wrap, as they cannot be written).
pub fn write_poll_answer(current_offset: u64, batches: &[&[IggyMessage]]) -> Bytes {
    let count: usize = batches.iter().map(|b| b.len()).sum();
    let mut out = BytesMut::new();
    out.put_u32_le(1);
    out.put_u64_le(current_offset);
    out.put_u32_le(u32::try_from(count).unwrap_or(u32::MAX));
    for batch in batches {
        let base_offset = batch.first().map_or(0, |m| m.header.offset);
        let base_origin = batch
            .iter()
            .map(|m| m.header.origin_timestamp)
            .min()
            .unwrap_or(0);
        let start = out.len();
        out.put_bytes(0, BATCH_HEADER_SIZE);
        for m in batch.iter() {
            let headers = m.user_headers.as_deref().unwrap_or_default();
            out.put_u64_le(m.header.checksum);
            out.put_u128_le(m.header.id);
            out.put_u32_le(m.header.offset.wrapping_sub(base_offset) as u32);
            out.put_u32_le(m.header.origin_timestamp.wrapping_sub(base_origin) as u32);
            out.put_u32_le(headers.len() as u32);
            out.put_u32_le(m.payload.len() as u32);
            out.put_u64_le(0);
            out.put_slice(&m.payload);
            out.put_slice(headers);
        }
        let mut header = BatchHeader::new(
            1,
            base_origin,
            (out.len() - start) as u64,
            u32::try_from(batch.len()).unwrap_or(u32::MAX),
        );
        header.base_offset = base_offset;
        header.base_timestamp = base_origin;
        header.encode_into(&mut out[start..start + BATCH_HEADER_SIZE]);
    }
    out.freeze()
}

#[cfg(test)]
mod tests;
