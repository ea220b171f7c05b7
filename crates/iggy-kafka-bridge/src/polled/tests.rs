use super::*;
use crate::mapping::{TxnTag, from_polled, to_message_at};
use bytes::BytesMut;
use iggy::prelude::{HeaderKey, HeaderValue, PolledMessages};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Messages of every shape a poll can hold: the mapping's test batch (native form with
/// and without key and headers, envelope form, transactional), a native Iggy producer's
/// message without headers, and one whose headers only the SDK's map reads (an Int64
/// name).
fn messages() -> Vec<IggyMessage> {
    let (frame, records) = crate::mapping::fetch_tests::batch();
    let mut out: Vec<IggyMessage> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let first = (i == 0).then_some(&frame);
            let txn = TxnTag::of(&frame, r);
            to_message_at(r, i as i32, first, txn.as_ref(), 1_000_000 + i as u64).unwrap()
        })
        .collect();
    out.push(
        IggyMessage::builder()
            .payload(Bytes::from_static(b"plain"))
            .build()
            .unwrap(),
    );
    let mut map = BTreeMap::new();
    map.insert(HeaderKey::from(7i64), HeaderValue::from(1i64));
    out.push(
        IggyMessage::builder()
            .payload(Bytes::from_static(b"odd"))
            .user_headers(map)
            .build()
            .unwrap(),
    );
    out
}

/// A poll answer of batches of `(offset, origin timestamp, message)`.
fn answer(current_offset: u64, batches: &[Vec<(u64, u64, &IggyMessage)>]) -> Bytes {
    let placed: Vec<Vec<IggyMessage>> = batches
        .iter()
        .map(|b| {
            b.iter()
                .map(|(offset, origin, m)| {
                    let mut m = IggyMessage::from_bytes(m.to_bytes()).unwrap();
                    m.header.offset = *offset;
                    m.header.origin_timestamp = *origin;
                    m
                })
                .collect()
        })
        .collect();
    let slices: Vec<&[IggyMessage]> = placed.iter().map(Vec::as_slice).collect();
    write_poll_answer(current_offset, &slices)
}

/// What the SDK's decode followed by the mapping makes of an answer.
fn through_the_sdk(answer: Bytes, from: u64) -> Result<(u64, Vec<MappedRecord>), String> {
    let polled = PolledMessages::from_bytes(answer).map_err(|e| e.to_string())?;
    let mut records = Vec::new();
    for m in polled.messages {
        if m.header.offset >= from {
            records.push(from_polled(m).map_err(|e| e.to_string())?);
        }
    }
    Ok((polled.current_offset, records))
}

fn fixture() -> (Vec<IggyMessage>, Bytes) {
    let messages = messages();
    let batches = vec![
        messages[..2]
            .iter()
            .enumerate()
            .map(|(i, m)| (100 + i as u64, 5_000 + i as u64 * 7, m))
            .collect::<Vec<_>>(),
        messages[2..]
            .iter()
            .enumerate()
            .map(|(i, m)| (102 + i as u64, 4_000 + i as u64, m))
            .collect(),
    ];
    let bytes = answer(120, &batches);
    (messages, bytes)
}

#[test]
fn an_answer_reads_as_the_sdk_and_the_mapping_read_it() {
    let (messages, bytes) = fixture();
    for from in [0, 100, 101, 102, 104, 105, 106] {
        let ours = decode_poll(bytes.clone(), from).unwrap();
        let (current, theirs) = through_the_sdk(bytes.clone(), from).unwrap();
        assert_eq!(ours.current_offset, current);
        assert_eq!(ours.current_offset, 120);
        assert_eq!(ours.records, theirs, "from {from}");
        assert_eq!(
            ours.records.len(),
            106usize.saturating_sub(from.max(100) as usize)
        );
        assert_eq!(ours.messages, messages.len());
        let data: usize = messages
            .iter()
            .map(|m| m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len))
            .sum();
        assert_eq!(ours.data_bytes, data);
    }
    // Offsets and timestamps come from each batch's bases plus the frame's deltas.
    let all = decode_poll(bytes, 0).unwrap().records;
    let offsets: Vec<u64> = all.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [100, 101, 102, 103, 104, 105]);
    // The native message has no kafka.timestamp: its origin timestamp (µs) in ms.
    assert_eq!(all[4].record.timestamp, 4);
    assert!(all.iter().any(|r| r.envelope));
    assert!(all[0].txn.is_some() && all[0].batch.is_some());
}

#[test]
fn an_empty_answer_is_no_records() {
    let bytes = answer(7, &[]);
    let polled = decode_poll(bytes, 3).unwrap();
    assert_eq!(polled.current_offset, 7);
    assert!(polled.records.is_empty());
    assert_eq!(polled.messages, 0);
}

#[test]
fn malformed_answers_are_errors() {
    let (_, bytes) = fixture();
    // Short of the prefix.
    assert!(decode_poll(bytes.slice(..10), 0).is_err());
    // A batch cut short, a frame cut short.
    for cut in [POLL_PREFIX_LEN + 100, bytes.len() - 1] {
        assert!(decode_poll(bytes.slice(..cut), 0).is_err(), "cut at {cut}");
    }
    // A batch length below its own header would never advance.
    let mut m = BytesMut::from(&bytes[..]);
    m[POLL_PREFIX_LEN + 32..POLL_PREFIX_LEN + 40].copy_from_slice(&10u64.to_le_bytes());
    assert!(decode_poll(m.freeze(), 0).is_err());
    // A payload length past the batch.
    let mut m = BytesMut::from(&bytes[..]);
    let frame = POLL_PREFIX_LEN + BATCH_HEADER_SIZE;
    m[frame + 36..frame + 40].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_poll(m.freeze(), 0).is_err());
}

#[test]
fn a_claimed_count_sizes_nothing_the_answer_cannot_hold() {
    let mut m = BytesMut::from(&answer(0, &[])[..]);
    m[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    let polled = decode_poll(m.freeze(), 0).unwrap();
    assert!(polled.records.capacity() <= 1);
    let (_, bytes) = fixture();
    let mut m = BytesMut::from(&bytes[..]);
    m[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    let room = (bytes.len() - POLL_PREFIX_LEN) / BATCH_MESSAGE_HEADER_SIZE;
    let polled = decode_poll(m.freeze(), 0).unwrap();
    assert_eq!(polled.records.len(), 6);
    assert!(polled.records.capacity() <= room);
}

#[test]
fn an_answer_claiming_more_than_it_holds_is_seen() {
    let (_, bytes) = fixture();
    assert!(!claims_more_than_it_holds(&bytes));
    assert!(!claims_more_than_it_holds(&answer(0, &[])));
    assert!(claims_more_than_it_holds(&bytes[..10]));
    let mut m = BytesMut::from(&bytes[..]);
    let room = (bytes.len() - POLL_PREFIX_LEN) / BATCH_MESSAGE_HEADER_SIZE;
    m[12..16].copy_from_slice(&(room as u32).to_le_bytes());
    assert!(!claims_more_than_it_holds(&m));
    m[12..16].copy_from_slice(&(room as u32 + 1).to_le_bytes());
    assert!(claims_more_than_it_holds(&m));
    m[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(claims_more_than_it_holds(&m));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any damage to an answer (bytes changed, cut short) gives an error or the
    /// records the SDK and the mapping would give; never a panic. The message count
    /// only sizes: the SDK's decode reserves what it claims (a damaged count aborts the
    /// process on a failed allocation), so it is compared with the count kept, and the
    /// decode here reads the same records whatever the count says.
    #[test]
    fn damaged_answers_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        from in 99u64..106,
    ) {
        let (_, bytes) = fixture();
        let mut m = BytesMut::from(&bytes[..]);
        for (at, byte) in flips {
            let at = at.index(m.len());
            m[at] = byte;
        }
        let len = cut.index(m.len() + 1);
        let damaged = m.clone().freeze().slice(..len);
        let ours = decode_poll(damaged, from);
        m[12..16].copy_from_slice(&bytes[12..16]);
        let counted = m.freeze().slice(..len);
        let ours_counted = decode_poll(counted.clone(), from);
        match (&ours, &ours_counted) {
            (Ok(a), Ok(b)) => prop_assert_eq!(&a.records, &b.records),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(len < POLL_PREFIX_LEN, "the count changed the outcome"),
        }
        if let (Ok(ours), Ok((current, theirs))) = (ours_counted, through_the_sdk(counted, from)) {
            prop_assert_eq!(ours.current_offset, current);
            prop_assert_eq!(ours.records, theirs);
        }
    }
}
