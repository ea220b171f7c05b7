//! Property tests: random records survive encode -> decode under every codec, alone and
//! as part of a multi-batch sequence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kafka_records::{
    BatchOptions, BatchWriter, Compression, DecodeLimits, ExactReencoding, Header, NewRecord,
    RecordBatch, TimestampType, decode_batches, encode_batch, encode_batch_with_crc,
};
use proptest::prelude::*;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn nullable_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Bytes::new())),
        3 => prop::collection::vec(any::<u8>(), 0..max).prop_map(|v| Some(Bytes::from(v))),
    ]
}

fn header() -> impl Strategy<Value = Header> {
    // A small name alphabet makes repeated names common.
    (
        prop::sample::select(vec!["", "a", "b", "trace-id", "ünï"]),
        nullable_bytes(16),
    )
        .prop_map(|(name, value)| Header::new(name, value))
}

fn timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => 1_600_000_000_000i64..1_800_000_000_000,
        1 => any::<i64>(),
        1 => -10i64..10,
    ]
}

fn record() -> impl Strategy<Value = NewRecord> {
    (
        timestamp(),
        nullable_bytes(64),
        nullable_bytes(300),
        prop::collection::vec(header(), 0..5),
    )
        .prop_map(|(timestamp, key, value, headers)| NewRecord {
            timestamp,
            key,
            value,
            headers,
        })
}

fn options() -> impl Strategy<Value = BatchOptions> {
    (
        any::<i64>(),
        any::<i32>(),
        any::<bool>(),
        any::<bool>(),
        any::<i64>(),
        any::<i16>(),
        any::<i32>(),
    )
        .prop_map(
            |(base_offset, epoch, log_append, transactional, pid, pepoch, seq)| BatchOptions {
                base_offset,
                partition_leader_epoch: epoch,
                timestamp_type: if log_append {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                },
                transactional,
                producer_id: pid,
                producer_epoch: pepoch,
                base_sequence: seq,
                ..BatchOptions::default()
            },
        )
}

fn check_round_trip(options: &BatchOptions, records: &[NewRecord]) -> Result<(), TestCaseError> {
    let mut out = BytesMut::new();
    encode_batch(options, records, &mut out).unwrap();
    let bytes = out.freeze();
    let batch = RecordBatch::decode(&bytes, &DecodeLimits::default()).unwrap();
    let h = batch.header();
    prop_assert_eq!(batch.encoded_len(), bytes.len());
    prop_assert_eq!(batch.compression(), options.compression);
    prop_assert_eq!(batch.timestamp_type(), options.timestamp_type);
    prop_assert_eq!(batch.is_transactional(), options.transactional);
    prop_assert_eq!(h.base_offset, options.base_offset);
    prop_assert_eq!(h.partition_leader_epoch, options.partition_leader_epoch);
    prop_assert_eq!(h.producer_id, options.producer_id);
    prop_assert_eq!(h.producer_epoch, options.producer_epoch);
    prop_assert_eq!(h.base_sequence, options.base_sequence);
    prop_assert_eq!(h.record_count as usize, records.len());
    let decoded: Vec<_> = batch.records().unwrap().collect::<Result<_, _>>().unwrap();
    prop_assert_eq!(decoded.len(), records.len());
    for (i, (got, want)) in decoded.iter().zip(records).enumerate() {
        prop_assert_eq!(got.offset_delta as usize, i);
        prop_assert_eq!(got.offset, options.base_offset.wrapping_add(i as i64));
        let expected_ts = match options.timestamp_type {
            TimestampType::CreateTime => want.timestamp,
            TimestampType::LogAppendTime => h.max_timestamp,
        };
        prop_assert_eq!(got.timestamp, expected_ts);
        prop_assert_eq!(
            h.base_timestamp.wrapping_add(got.timestamp_delta),
            want.timestamp
        );
        prop_assert_eq!(&got.key, &want.key);
        prop_assert_eq!(&got.value, &want.value);
        prop_assert_eq!(got.headers.len(), want.headers.len());
        prop_assert_eq!(&got.headers.to_vec(), &want.headers);
        prop_assert_eq!(got.control, None);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn records_round_trip_under_every_codec(
        options in options(),
        records in prop::collection::vec(record(), 0..40),
    ) {
        for compression in CODECS {
            let options = BatchOptions { compression, ..options };
            check_round_trip(&options, &records)?;
        }
    }

    #[test]
    fn sequences_round_trip_and_report_the_tail(
        batches in prop::collection::vec(
            (prop::sample::select(CODECS.to_vec()), prop::collection::vec(record(), 0..8)),
            1..5,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut out = BytesMut::new();
        let mut ends = Vec::new();
        let mut base_offset = 0i64;
        for (compression, records) in &batches {
            let options = BatchOptions { compression: *compression, base_offset, ..BatchOptions::default() };
            encode_batch(&options, records, &mut out).unwrap();
            ends.push(out.len());
            base_offset += records.len() as i64;
        }
        let bytes = out.freeze();

        let seq = decode_batches(&bytes, &DecodeLimits::default()).unwrap();
        prop_assert_eq!(seq.truncated_tail, 0);
        prop_assert_eq!(seq.batches.len(), batches.len());
        let mut all = Vec::new();
        for batch in &seq.batches {
            for r in batch.records().unwrap() {
                all.push(r.unwrap());
            }
        }
        let expected: Vec<&NewRecord> = batches.iter().flat_map(|(_, r)| r).collect();
        prop_assert_eq!(all.len(), expected.len());
        for (i, (got, want)) in all.iter().zip(expected).enumerate() {
            prop_assert_eq!(got.offset, i as i64);
            prop_assert_eq!(&got.value, &want.value);
        }

        // Cut anywhere: the whole batches before the cut decode, the rest is the tail.
        let at = cut.index(bytes.len() + 1);
        let seq = decode_batches(&bytes.slice(..at), &DecodeLimits::default()).unwrap();
        let whole = ends.iter().filter(|&&end| end <= at).count();
        prop_assert_eq!(seq.batches.len(), whole);
        let consumed = if whole == 0 { 0 } else { ends[whole - 1] };
        prop_assert_eq!(seq.truncated_tail, at - consumed);
    }

    #[test]
    fn batches_written_record_by_record_are_the_encoded_ones(
        options in options(),
        base_timestamp in prop::option::of(timestamp()),
        records in prop::collection::vec(record(), 0..40),
        prefix in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let options = BatchOptions { compression: Compression::None, base_timestamp, ..options };
        let mut expected = BytesMut::from(&prefix[..]);
        encode_batch(&options, &records, &mut expected).unwrap();
        let mut out = BytesMut::from(&prefix[..]);
        let mut writer = BatchWriter::new(&options, &mut out).unwrap();
        for r in &records {
            let headers = r.headers.iter().map(|h| (&h.key[..], h.value.as_deref()));
            writer.record(r.timestamp, r.key.as_deref(), r.value.as_deref(), headers).unwrap();
        }
        prop_assert_eq!(writer.count() as usize, records.len());
        writer.finish(None).unwrap();
        prop_assert_eq!(&out[..], &expected[..]);
    }

    #[test]
    fn uncompressed_create_time_batches_re_encode_exactly(
        options in options(),
        records in prop::collection::vec(record(), 1..40),
    ) {
        let options = BatchOptions {
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            control: false,
            ..options
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        let original = out.freeze();
        let batch = RecordBatch::decode(&original, &DecodeLimits::default()).unwrap();
        let mut exact = ExactReencoding::new(&batch);
        let mut decoded = Vec::new();
        for record in batch.records().unwrap() {
            let record = record.unwrap();
            exact.record(&record);
            decoded.push(NewRecord::from(record));
        }
        let crc = exact.crc();
        prop_assert_eq!(crc, Some(batch.header().crc));
        let section = batch.records_section().unwrap();
        let mut in_place = ExactReencoding::new(&batch);
        for record in batch.record_refs_in(&section) {
            in_place.record_ref(&record.unwrap());
        }
        prop_assert_eq!(in_place.crc(), crc);
        let options = BatchOptions { base_timestamp: Some(batch.header().base_timestamp), ..options };
        let mut again = BytesMut::new();
        encode_batch_with_crc(&options, &decoded, crc.unwrap(), &mut again).unwrap();
        prop_assert_eq!(&again[..], &original[..]);
    }

    #[test]
    fn log_append_time_rewrite_preserves_records(
        records in prop::collection::vec(record(), 0..20),
        compression in prop::sample::select(CODECS.to_vec()),
        append_time in any::<i64>(),
        new_base in any::<i64>(),
    ) {
        let options = BatchOptions { compression, ..BatchOptions::default() };
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        kafka_records::set_base_offset(&mut out, new_base).unwrap();
        kafka_records::set_log_append_time(&mut out, append_time).unwrap();
        let batch = RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap();
        prop_assert_eq!(batch.header().base_offset, new_base);
        prop_assert_eq!(batch.header().max_timestamp, append_time);
        let decoded: Vec<_> = batch.records().unwrap().collect::<Result<_, _>>().unwrap();
        for (got, want) in decoded.iter().zip(&records) {
            prop_assert_eq!(got.timestamp, append_time);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers.to_vec(), &want.headers);
        }
    }
}
