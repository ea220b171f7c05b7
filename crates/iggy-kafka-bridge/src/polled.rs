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
//! Every poll the bridge makes is sent by `poll_answer`. Readers that need the SDK's
//! messages (their ids, raw payloads) use `poll_checked`, which refuses an answer
//! claiming more messages than it can hold before the SDK's decode reserves room for
//! them.

use crate::connection::signed_in_request;
use crate::mapping::{self, MappedRecord, MappingError};
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

/// Bytes before the first batch of a poll's answer.
pub const POLL_PREFIX_LEN: usize = 16;

/// A decoded poll.
#[derive(Debug, Default)]
pub struct Polled {
    /// Iggy's current offset of the partition (that of its last message) as the poll saw
    /// it.
    pub current_offset: u64,
    /// The records at or after the offset asked for, in offset order.
    pub records: Vec<MappedRecord>,
    /// Messages in the answer (including any before the offset asked for).
    pub messages: usize,
    /// Payload and user-header bytes of those messages.
    pub data_bytes: usize,
}

/// Reads a `PollMessages` answer. Messages before `from` (an answer may start earlier
/// than the offset asked for) are counted but not returned.
pub fn decode_poll(answer: Bytes, from: u64) -> Result<Polled, MappingError> {
    let bad = |what: &str| MappingError::BadFrame(format!("poll answer: {what}"));
    let prefix = answer
        .get(..POLL_PREFIX_LEN)
        .ok_or_else(|| bad("shorter than its prefix"))?;
    let current_offset = u64::from_le_bytes(
        prefix[4..12]
            .try_into()
            .map_err(|_| bad("current offset"))?,
    );
    let (claimed, room) = claimed_and_room(&answer).ok_or_else(|| bad("count"))?;
    // The claimed count sizes the vector only as far as the answer can hold messages.
    let mut out = Polled {
        current_offset,
        records: Vec::with_capacity(claimed.min(room)),
        messages: 0,
        data_bytes: 0,
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
            let frame = BatchMessageHeader::decode(&answer[cursor..batch_end])
                .map_err(|e| bad(&format!("message frame at {cursor}: {e}")))?;
            let payload_start = cursor + BATCH_MESSAGE_HEADER_SIZE;
            let ends = payload_start
                .checked_add(frame.payload_length as usize)
                .and_then(|p| Some((p, p.checked_add(frame.user_headers_length as usize)?)))
                .filter(|(_, h)| *h <= batch_end);
            let Some((payload_end, headers_end)) = ends else {
                return Err(bad(&format!("message at {cursor} runs past its batch")));
            };
            cursor = headers_end;
            out.messages += 1;
            out.data_bytes += headers_end - payload_start;
            let offset = batch
                .base_offset
                .wrapping_add(u64::from(frame.offset_delta));
            if offset < from {
                continue;
            }
            let origin = batch
                .origin_timestamp
                .wrapping_add(u64::from(frame.timestamp_delta));
            let payload = answer.slice(payload_start..payload_end);
            let record = if frame.user_headers_length == 0 {
                mapping::from_scanned(offset, origin, None, payload, Default::default())
            } else {
                match mapping::scan_headers(&answer, payload_end, headers_end) {
                    Some(scanned) => {
                        let frame = scanned.frame.and_then(|(s, e)| answer.get(s..e));
                        mapping::from_scanned(offset, origin, frame, payload, scanned)
                    }
                    // Headers of another shape: through the SDK's header map.
                    None => mapping::from_message_mapped(&IggyMessage {
                        header: IggyMessageHeader {
                            checksum: frame.checksum,
                            id: frame.id,
                            offset,
                            timestamp: batch.base_timestamp,
                            origin_timestamp: origin,
                            user_headers_length: frame.user_headers_length,
                            payload_length: frame.payload_length,
                            reserved: 0,
                        },
                        payload,
                        user_headers: Some(answer.slice(payload_end..headers_end)),
                    }),
                }
            };
            match record {
                Ok(record) => out.records.push(record),
                Err(e) => return Err(MappingError::BadFrame(format!("offset {offset}: {e}"))),
            }
        }
        position = batch_end;
    }
    Ok(out)
}

/// Polls up to `count` (at least one) messages of one partition without a stored
/// consumer offset, as the SDK's `poll_messages` asks for them (consumer 0, no
/// auto-commit, same request, sign-in check and transport), and returns Iggy's answer
/// undecoded, for [`decode_poll`] or [`poll_checked`].
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
