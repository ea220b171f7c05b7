//! Fuzz target: decodes arbitrary bytes as a sequence of record batches, walks every
//! record and header, and exercises the in-place rewrites on each whole batch.
//!
//! ```text
//! input: [mode u8][bytes...]
//!   mode bit 0 = 1: recompute the CRC of every framed batch first, so mutations reach
//!                   the codecs and the record parser instead of dying at the CRC check
//! ```
//!
//! Limits are small so a decompression bomb shows up as an error, not as an OOM kill
//! from libFuzzer's RSS cap.

#![no_main]

use bytes::Bytes;
use kafka_records::{Batches, DecodeLimits, RecordBatch, set_base_offset, set_log_append_time};
use libfuzzer_sys::fuzz_target;

/// Rewrites the CRC of each batch whose length field frames it inside `buf`.
fn fix_crcs(buf: &mut [u8]) {
    let mut pos = 0;
    while let Some(len) = buf.get(pos + 8..pos + 12) {
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = pos + 12 + len;
        if len < 49 || end > buf.len() {
            return;
        }
        let crc = crc32c::crc32c(&buf[pos + 21..end]);
        buf[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        fix_crcs(&mut buf);
    }
    let limits = DecodeLimits {
        max_decompressed_bytes: 4 << 20,
        max_records_per_batch: 100_000,
    };
    let input = Bytes::from(buf);
    let mut batches = Batches::new(input.clone(), limits);
    for batch in batches.by_ref() {
        let Ok(batch) = batch else { break };
        if let Ok(records) = batch.records() {
            let mut touched = 0usize;
            for record in records {
                let Ok(record) = record else { break };
                touched = touched
                    .wrapping_add(record.key.as_ref().map_or(0, |k| k.len()))
                    .wrapping_add(record.value.as_ref().map_or(0, |v| v.len()));
                let mut n = 0;
                for header in &record.headers {
                    touched = touched.wrapping_add(header.key.len());
                    n += 1;
                }
                assert_eq!(n, record.headers.len());
                if batch.is_control() {
                    assert!(record.control.is_some());
                }
            }
            std::hint::black_box(touched);
        }
        let mut copy = batch.as_bytes().to_vec();
        assert!(set_base_offset(&mut copy, 42).is_ok());
        assert!(set_log_append_time(&mut copy, 7).is_ok());
        // A rewritten batch must still verify.
        let rewritten = RecordBatch::decode(&Bytes::from(copy), &limits);
        assert!(rewritten.is_ok(), "{rewritten:?}");
    }
    assert!(batches.truncated_tail() <= input.len());
});
