//! What a consumer's reads ask of Iggy: a partition read from start to end, one Fetch's
//! worth at a time, returns every record once and has each message polled once (about
//! once when its producer batches vary in size). Skipped (with a printed notice)
//! without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};
use kafka_store::LogStore;
use support::{Server, create};

/// One uncompressed batch of `records` records of `value_len` bytes each.
fn batch(first: usize, records: usize, value_len: usize) -> Bytes {
    let records: Vec<NewRecord> = (first..first + records)
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000 + i as i64,
            key: None,
            value: Some(Bytes::from(vec![(i % 251) as u8; value_len])),
            headers: vec![],
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

/// Reads the partition from offset 0 to `end` with `max_bytes` a read, as a consumer
/// does, checking every record's offset and first value byte; the offset it got to.
async fn read_all(store: &impl LogStore, topic: &str, end: i64, max_bytes: usize) -> i64 {
    let mut offset = 0i64;
    while offset < end {
        let out = store.read(topic, 0, offset, max_bytes).await.unwrap();
        assert!(!out.batches.is_empty(), "no records at {offset} of {end}");
        for bytes in &out.batches {
            let b = RecordBatch::decode(bytes, &DecodeLimits::default()).unwrap();
            for r in b.records().unwrap() {
                let r = r.unwrap();
                let at = b.header().base_offset + i64::from(r.offset_delta);
                // A read starts with the batch holding its offset; clients skip what is
                // before it.
                if at < offset {
                    continue;
                }
                assert_eq!(at, offset, "a record missing before {at}");
                let value = r.value.unwrap();
                assert_eq!(value[0], (at % 251) as u8, "value of {at}");
                offset += 1;
            }
        }
    }
    offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_batches_of_one_size_poll_each_message_once() {
    let Some(bin) = support::server_bin("reads_of_batches_of_one_size_poll_each_message_once")
    else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("reads-{}", support::run_id());
    create(&bridge, &topic, 1).await;
    // 300 records of 1000 bytes a batch: a 256 KiB read returns one batch, and the
    // read-ahead's polls (four reads' worth) would end inside the fourth.
    const BATCHES: usize = 30;
    const RECORDS: usize = 300;
    for b in 0..BATCHES {
        let sent = batch(b * RECORDS, RECORDS, 1000);
        bridge
            .append(&topic, 0, kafka_store::suite::valid(vec![sent]).unwrap(), 0)
            .await
            .unwrap();
    }
    let total = (BATCHES * RECORDS) as i64;
    let before = bridge.polled_messages();
    assert_eq!(read_all(&bridge, &topic, total, 256 * 1024).await, total);
    let polled = bridge.polled_messages() - before;
    println!("{polled} messages polled for {total}");
    // The first read's poll is sized before any batch was seen and may end inside one;
    // after it every poll asks for whole batches.
    assert!(
        polled >= total as u64 && polled <= total as u64 + RECORDS as u64,
        "{polled} messages polled for {total}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_batches_of_varying_sizes_return_every_record_once() {
    let Some(bin) =
        support::server_bin("reads_of_batches_of_varying_sizes_return_every_record_once")
    else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("reads-vary-{}", support::run_id());
    create(&bridge, &topic, 1).await;
    // Batch sizes that the poll counts assumed from the one before never fit: answers
    // end inside batches, which the next polls finish.
    let mut next = 0usize;
    for (i, records) in [7usize, 300, 1, 450, 299, 301, 2, 600, 13, 300, 300, 77]
        .into_iter()
        .cycle()
        .take(36)
        .enumerate()
    {
        let sent = batch(next, records, 200 + (i % 5) * 300);
        bridge
            .append(&topic, 0, kafka_store::suite::valid(vec![sent]).unwrap(), 0)
            .await
            .unwrap();
        next += records;
    }
    let total = next as i64;
    for max_bytes in [1, 64 * 1024, 256 * 1024, 4 << 20] {
        let before = bridge.polled_messages();
        assert_eq!(read_all(&bridge, &topic, total, max_bytes).await, total);
        let polled = bridge.polled_messages() - before;
        println!("max_bytes {max_bytes}: {polled} messages polled for {total}");
        // A batch an answer ends inside is finished from the next answer, not polled
        // again; what may be polled twice is bounded by two of the largest batches.
        assert!(
            polled >= total as u64 && polled <= total as u64 + 1200,
            "max_bytes {max_bytes}: {polled} messages polled for {total}"
        );
    }
}
