use super::*;
use crate::mapping::{TxnTag, from_polled, to_message_at};
use bytes::BytesMut;
use iggy::prelude::{HeaderKey, HeaderValue, PolledMessages};
use kafka_records::NewRecord;
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

/// A copy of `bytes` with each of `flips` written (its byte at its index, taken within
/// the length).
fn flipped(bytes: &[u8], flips: Vec<(prop::sample::Index, u8)>) -> BytesMut {
    let mut m = BytesMut::from(bytes);
    for (at, byte) in flips {
        let at = at.index(m.len());
        m[at] = byte;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any damage to an answer (bytes changed, cut short; of the mixed fixture or of a
    /// plain batch the read writes whole) gives an error or the records the SDK and the
    /// mapping would give, and the read's items the same records; never a panic. The message count
    /// only sizes: the SDK's decode reserves what it claims (a damaged count aborts the
    /// process on a failed allocation), so it is compared with the count kept, and the
    /// decode here reads the same records whatever the count says.
    #[test]
    fn damaged_answers_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        from in 99u64..106,
        plain in any::<bool>(),
    ) {
        let bytes = if plain { plain_fixture().1 } else { fixture().1 };
        let from = if plain { from - 60 } else { from };
        let mut m = flipped(&bytes, flips);
        let len = cut.index(m.len() + 1);
        let damaged = m.clone().freeze().slice(..len);
        let ours = decode_poll(damaged.clone(), from);
        m[12..16].copy_from_slice(&bytes[12..16]);
        let counted = m.freeze().slice(..len);
        let ours_counted = decode_poll(counted.clone(), from);
        match (&ours, &ours_counted) {
            (Ok(a), Ok(b)) => prop_assert_eq!(&a.records, &b.records),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(len < POLL_PREFIX_LEN, "the count changed the outcome"),
        }
        // Read as a read takes it: no panic either, and the same records as far as the
        // items go.
        let _ = decode_poll_items(damaged, from);
        match (decode_poll_items(counted.clone(), from), &ours_counted) {
            (Ok(items), Ok(records)) => {
                prop_assert!(offsets(&records.records).starts_with(&covered(&items.records)));
            }
            (Err(_), Err(_)) => {}
            (items, records) => prop_assert!(
                false,
                "items {:?} but records {:?}",
                items.as_ref().err(),
                records.as_ref().err()
            ),
        }
        if let (Ok(ours), Ok((current, theirs))) = (ours_counted, through_the_sdk(counted, from)) {
            prop_assert_eq!(ours.current_offset, current);
            prop_assert_eq!(ours.records, theirs);
        }
    }
}

/// The offsets of `records`.
fn offsets(records: &[MappedRecord]) -> Vec<u64> {
    records.iter().map(|m| m.offset).collect()
}

/// The offsets `items` cover.
fn covered(items: &[Item]) -> Vec<u64> {
    items
        .iter()
        .flat_map(|i| i.offset()..=i.last_offset())
        .collect()
}

/// What a read makes of `records` (a poll's records, in order) as it encodes them: one
/// Kafka batch for a producer batch whose records are all there from its first, per
/// record otherwise. Paired with the offsets each item covers.
fn encoded_by_records(records: &[MappedRecord]) -> Vec<(u64, u64, Option<Bytes>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(m) = records.get(i) {
        let whole = m.batch.as_deref().filter(|_| m.offset_delta == Some(0));
        let n = whole.and_then(|f| usize::try_from(f.record_count).ok());
        let run = n
            .filter(|n| *n >= 1 && i + n <= records.len())
            .map(|n| &records[i..i + n])
            .filter(|run| {
                run.iter().enumerate().all(|(k, r)| {
                    r.offset == m.offset + k as u64
                        && r.offset_delta == Some(k as i32)
                        && (k == 0 || r.batch.is_none())
                })
            });
        match run {
            Some(run) => {
                let mut bytes = BytesMut::new();
                mapping::encode_run(m.offset as i64, whole, run, &mut bytes).unwrap();
                out.push((
                    m.offset,
                    m.offset + run.len() as u64 - 1,
                    Some(bytes.freeze()),
                ));
                i += run.len();
            }
            None => {
                out.push((m.offset, m.offset, None));
                i += 1;
            }
        }
    }
    out
}

/// Checks `decode_poll_items` against `decode_poll`: the same records (up to a batch
/// the answer ends inside, after other items), and every whole batch the bytes the
/// read would encode from its records. Returns how many items were whole batches.
fn check_items(answer: &Bytes, from: u64) -> Result<usize, TestCaseError> {
    let records = decode_poll(answer.clone(), from).unwrap();
    let items = decode_poll_items(answer.clone(), from).unwrap();
    prop_assert_eq!(items.current_offset, records.current_offset);
    prop_assert_eq!(items.messages, records.messages);
    prop_assert_eq!(items.data_bytes, records.data_bytes);
    let by_offset: BTreeMap<u64, &MappedRecord> =
        records.records.iter().map(|m| (m.offset, m)).collect();
    let covered = covered(&items.records);
    let all = offsets(&records.records);
    prop_assert_eq!(&covered[..], &all[..covered.len()]);
    if covered.len() < all.len() {
        // Cut before a batch the answer ends inside.
        prop_assert!(!items.records.is_empty());
        let next = &records.records[covered.len()];
        let frame = next
            .batch
            .as_deref()
            .filter(|_| next.offset_delta == Some(0));
        prop_assert!(frame.is_some_and(|f| f.attributes & 0x07 == 0 && !next.envelope));
        let count = frame.map_or(0, |f| f.record_count as usize);
        prop_assert!(count > all.len() - covered.len());
    }
    let mut wholes = 0;
    for item in &items.records {
        if check_item(item, &records.records, &by_offset)? {
            wholes += 1;
        }
    }
    Ok(wholes)
}

/// Checks one item against `records` (`decode_poll`'s, by offset in `by_offset`): a
/// record is the one at its offset, a whole batch the bytes the read would encode from
/// its records. Returns whether it was a whole batch.
fn check_item(
    item: &Item,
    records: &[MappedRecord],
    by_offset: &BTreeMap<u64, &MappedRecord>,
) -> Result<bool, TestCaseError> {
    match item {
        Item::Record(m) => {
            prop_assert_eq!(Some(&m), by_offset.get(&m.offset));
            Ok(false)
        }
        Item::Batch(b) => {
            let run: Vec<MappedRecord> = records
                .iter()
                .filter(|m| (b.base_offset..=b.last_offset).contains(&m.offset))
                .cloned()
                .collect();
            let expected = encoded_by_records(&run);
            prop_assert_eq!(expected.len(), 1, "not one batch by records");
            prop_assert_eq!(expected[0].2.as_ref(), Some(&b.bytes));
            Ok(true)
        }
    }
}

fn producer_record() -> impl Strategy<Value = NewRecord> {
    let name = prop::sample::select(vec!["a", "b", "trace-id", "x-y", "zz"]);
    (
        1_699_000_000_000i64..1_701_000_000_000,
        prop::option::weighted(0.5, prop::collection::vec(any::<u8>(), 1..12)),
        prop::option::weighted(0.95, prop::collection::vec(any::<u8>(), 0..200)),
        prop::collection::btree_map(name, prop::collection::vec(any::<u8>(), 1..8), 0..3),
    )
        .prop_map(|(timestamp, key, value, headers)| NewRecord {
            timestamp,
            key: key.map(Bytes::from),
            value: value.map(Bytes::from),
            headers: headers
                .into_iter()
                .map(|(k, v)| {
                    kafka_records::Header::new(
                        Bytes::from_static(k.as_bytes()),
                        Some(Bytes::from(v)),
                    )
                })
                .collect(),
        })
}

/// A producer batch as the property tests make them: its records, batch attributes,
/// the producer's CRC when known, and its producer id.
type ProducerBatch = (Vec<NewRecord>, i16, Option<u32>, i64);

fn producer_batch() -> impl Strategy<Value = ProducerBatch> {
    (
        prop::collection::vec(producer_record(), 1..12),
        prop::sample::select(vec![0i16, 0x10, 0x01, 0x08]),
        prop::option::of(any::<u32>()),
        any::<i64>(),
    )
}

/// The messages the bridge stores for `batches`, in order.
fn producer_log(batches: &[ProducerBatch]) -> Vec<IggyMessage> {
    let mut messages = Vec::new();
    for (records, attributes, crc, producer_id) in batches {
        let frame = mapping::BatchFrame {
            attributes: *attributes,
            partition_leader_epoch: 3,
            base_timestamp: records[0].timestamp - 5,
            producer_id: (*producer_id).max(0),
            producer_epoch: 1,
            base_sequence: 9,
            record_count: records.len() as i32,
            crc: *crc,
        };
        for (i, r) in records.iter().enumerate() {
            let first = (i == 0).then_some(&frame);
            let txn = TxnTag::of(&frame, r);
            messages.push(to_message_at(r, i as i32, first, txn.as_ref(), 1_000_000).unwrap());
        }
    }
    messages
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Producer batches of every kind (plain, transactional, compressed, with and
    /// without a known CRC; records in native and in envelope form), laid out over
    /// Iggy batches at random and read from any offset: the read's items are
    /// `decode_poll`'s records, and every whole batch is what the read would encode.
    #[test]
    fn whole_batches_are_what_their_records_encode_to(
        batches in prop::collection::vec(producer_batch(), 1..5),
        splits in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        from in any::<prop::sample::Index>(),
        keep in any::<prop::sample::Index>(),
    ) {
        let messages = producer_log(&batches);
        let mut cuts: Vec<usize> = splits.iter().map(|s| s.index(messages.len())).collect();
        cuts.push(0);
        cuts.push(messages.len());
        cuts.sort_unstable();
        cuts.dedup();
        let placed: Vec<Vec<(u64, u64, &IggyMessage)>> = cuts
            .windows(2)
            .map(|w| {
                (w[0]..w[1])
                    .map(|i| (500 + i as u64, 7_000_000 + i as u64, &messages[i]))
                    .collect()
            })
            .collect();
        let bytes = answer(500 + messages.len() as u64, &placed);
        // Read from the start, every uncompressed batch of records in native form is
        // written whole.
        let eligible = batches
            .iter()
            .filter(|(records, attributes, _, _)| {
                attributes & 0x07 == 0 && records.iter().all(mapping::is_native)
            })
            .count();
        prop_assert_eq!(check_items(&bytes, 0)?, eligible);
        check_items(&bytes, 500 + from.index(messages.len()) as u64)?;
        // An answer that ends anywhere.
        let kept = keep.index(messages.len()) + 1;
        let placed: Vec<Vec<(u64, u64, &IggyMessage)>> = vec![
            (0..kept).map(|i| (500 + i as u64, 7_000_000, &messages[i])).collect(),
        ];
        let cut = answer(500 + messages.len() as u64, &placed);
        check_items(&cut, 0)?;
        // Cut inside an uncompressed batch of native records that is not the first:
        // the items end before it.
        let mut start = 0;
        for (records, attributes, _, _) in &batches {
            let end = start + records.len();
            if start < kept && kept < end {
                // Only the batch's first record is in the answer to tell.
                let eligible = attributes & 0x07 == 0 && mapping::is_native(&records[0]);
                let items = decode_poll_items(cut.clone(), 0).unwrap().records;
                let last = items.last().map(|i| i.last_offset());
                if eligible && start > 0 {
                    prop_assert_eq!(last, Some(500 + start as u64 - 1));
                } else {
                    prop_assert_eq!(last, Some(500 + kept as u64 - 1));
                }
            }
            start = end;
        }
    }
}

/// An answer holding one plain producer batch of five records in native form (key on
/// every other record, one header each) at offsets 40-44, and the records.
fn plain_fixture() -> (Vec<NewRecord>, Bytes) {
    let records: Vec<NewRecord> = (0..5)
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000 + i,
            key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(vec![i as u8; 100])),
            headers: vec![kafka_records::Header::new(
                Bytes::from_static(b"h"),
                Some(Bytes::from_static(b"v")),
            )],
        })
        .collect();
    let frame = mapping::BatchFrame {
        attributes: 0,
        partition_leader_epoch: -1,
        base_timestamp: 1_700_000_000_000,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: 5,
        crc: None,
    };
    let messages: Vec<IggyMessage> = records
        .iter()
        .enumerate()
        .map(|(i, r)| to_message_at(r, i as i32, (i == 0).then_some(&frame), None, 1).unwrap())
        .collect();
    let placed = vec![
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| (40 + i as u64, 9, m))
            .collect::<Vec<_>>(),
    ];
    let bytes = answer(44, &placed);
    (records, bytes)
}

#[test]
fn a_plain_batch_read_whole_is_written_once_and_decodes() {
    let (records, bytes) = plain_fixture();
    let items = decode_poll_items(bytes.clone(), 0).unwrap().records;
    let [Item::Batch(b)] = &items[..] else {
        panic!("one whole batch: {items:?}");
    };
    assert_eq!((b.base_offset, b.last_offset), (40, 44));
    let batch = kafka_records::RecordBatch::decode(&b.bytes, &Default::default()).unwrap();
    assert_eq!(batch.header().base_offset, 40);
    let back = crate::mapping::fetch_tests::records_of(&batch);
    assert_eq!(back, records);
    // From inside the batch the answer no longer holds it whole: records.
    let items = decode_poll_items(bytes, 42).unwrap().records;
    assert_eq!(items.len(), 3);
    assert!(items.iter().all(|i| matches!(i, Item::Record(_))));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A partition read from start to end by polls of any counts, each from where the
    /// items before it end and given the first messages of a batch the answer before
    /// ended inside: every message is polled once, the items cover every offset once
    /// in order, each record is `decode_poll`'s and each whole batch (from one answer or
    /// two) what the read would encode from its records.
    #[test]
    fn a_batch_an_answer_ends_inside_is_finished_from_the_next(
        batches in prop::collection::vec(producer_batch(), 1..6),
        counts in prop::collection::vec(1usize..20, 1..12),
        split in any::<prop::sample::Index>(),
    ) {
        let messages = producer_log(&batches);
        let end = 500 + messages.len() as u64;
        let placed = |from: u64, to: u64| -> Vec<(u64, u64, &IggyMessage)> {
            (from..to)
                .map(|o| (o, 7_000_000 + o, &messages[(o - 500) as usize]))
                .collect()
        };
        let all = answer(end, &[placed(500, end)]);
        let reference = decode_poll(all, 0).unwrap().records;
        let by_offset: BTreeMap<u64, &MappedRecord> =
            reference.iter().map(|m| (m.offset, m)).collect();
        // The batches the read writes whole: first offset -> last offset.
        let mut whole_from = BTreeMap::new();
        let mut start = 500u64;
        for (records, attributes, _, _) in &batches {
            let last = start + records.len() as u64 - 1;
            if attributes & 0x07 == 0 && records.iter().all(mapping::is_native) {
                whole_from.insert(start, last);
            }
            start = last + 1;
        }
        let mut next = 500u64;
        let mut partial: Option<Partial> = None;
        let mut polled = 0usize;
        let mut items = Vec::new();
        for count in counts.iter().cycle().take(10_000) {
            if next >= end {
                break;
            }
            let from = partial
                .as_ref()
                .filter(|p| p.head() == next)
                .map_or(next, Partial::end);
            let to = (from + *count as u64).min(end);
            // The answer as one Iggy batch or two.
            let at = from + split.index((to - from) as usize + 1) as u64;
            let bytes = answer(end, &[placed(from, at), placed(at, to)]);
            // A partial of a batch the read writes whole, all of whose rest the answer
            // holds, is finished whole.
            let finishes = partial.as_ref().filter(|p| p.head() == next).and_then(|p| {
                let head = whole_from.get(&p.head())?;
                (p.missing() as u64 <= to - from).then_some(*head)
            });
            let got = decode_poll_items_with(bytes, from, partial.take()).unwrap();
            if let Some(last_offset) = finishes {
                prop_assert!(
                    matches!(got.records.first(), Some(Item::Batch(b)) if b.base_offset == next
                        && b.last_offset == last_offset),
                    "the batch at {} not finished whole", next
                );
            }
            polled += got.messages;
            let last = got.records.last().map(Item::last_offset);
            prop_assert!(last.is_some(), "no items from {}", from);
            next = last.unwrap_or(next) + 1;
            if let Some(p) = &got.partial {
                prop_assert_eq!(p.head(), next);
                prop_assert!(p.end() <= to && p.missing() > 0);
            }
            partial = got.partial;
            items.extend(got.records);
        }
        prop_assert_eq!(polled, messages.len());
        prop_assert_eq!(covered(&items), (500..end).collect::<Vec<_>>());
        for item in &items {
            check_item(item, &reference, &by_offset)?;
        }
    }
}

/// A partial whose batch the next answer does not continue in the form it was
/// written in (another message where its third record should be) gives its messages
/// as records, and the answer's own items after them.
#[test]
fn a_partial_the_next_answer_does_not_finish_is_read_as_records() {
    let (partial, rest, messages) = partial_and_rest();
    assert_eq!(
        (partial.head(), partial.end(), partial.missing()),
        (502, 504, 3)
    );
    // The next answer from 504 holds another two-record batch where the third record
    // should be, and the head of a third.
    let odd: Vec<(u64, u64, &IggyMessage)> = [0, 1, 0]
        .iter()
        .enumerate()
        .map(|(i, m)| (504 + i as u64, 7_000_000, &messages[*m]))
        .collect();
    let got = decode_poll_items_with(answer(507, &[odd]), 504, Some(partial.clone())).unwrap();
    assert!(
        matches!(&got.records[..], [Item::Record(a), Item::Record(b), Item::Batch(c)]
        if (a.offset, b.offset, c.base_offset, c.last_offset) == (502, 503, 504, 505))
    );
    assert_eq!(got.partial.map(|p| (p.head(), p.end())), Some((506, 507)));
    // A partial that does not end where the answer starts is not used.
    let unused = decode_poll_items_with(rest.clone(), 505, Some(partial.clone())).unwrap();
    assert_eq!(covered(&unused.records), [505, 506]);
    // The right rest finishes it whole.
    let done = decode_poll_items_with(rest, 504, Some(partial)).unwrap();
    assert!(
        matches!(&done.records[..], [Item::Batch(b)] if (b.base_offset, b.last_offset) == (502, 506))
    );
}

/// A two-record batch and a five-record one at 500-506: the partial a first answer
/// ending after the second's first two records leaves, the answer with the rest
/// (504-506), and the log's messages.
fn partial_and_rest() -> (Partial, Bytes, Vec<IggyMessage>) {
    let (records, _) = plain_fixture();
    let batches: Vec<ProducerBatch> =
        vec![(records[..2].to_vec(), 0, None, 1), (records, 0, None, 1)];
    let messages = producer_log(&batches);
    let placed = |range: std::ops::Range<usize>| -> Vec<(u64, u64, &IggyMessage)> {
        range
            .map(|i| (500 + i as u64, 7_000_000, &messages[i]))
            .collect()
    };
    let first = decode_poll_items(answer(507, &[placed(0..4)]), 500).unwrap();
    assert_eq!(covered(&first.records), [500, 501]);
    let rest = answer(507, &[placed(4..7)]);
    (first.partial.unwrap(), rest, messages)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A damaged answer after a partial (bytes changed, cut short) gives an error or
    /// items from the partial's first record on, each offset once and in order; never
    /// a panic.
    #[test]
    fn damaged_answers_after_a_partial_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let (partial, rest, _) = partial_and_rest();
        let m = flipped(&rest, flips);
        let len = cut.index(m.len() + 1);
        let damaged = m.freeze().slice(..len);
        if let Ok(got) = decode_poll_items_with(damaged, 504, Some(partial)) {
            let offsets = covered(&got.records);
            prop_assert_eq!(offsets.first().copied(), Some(502));
            prop_assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", offsets);
        }
    }
}
