//! The embedded store through its public API only, as the gateway binary and other
//! crates use it: behind `Arc<dyn LogStore>` / `Arc<dyn OffsetStore>`, with the
//! background retention task.
//!
//! The full storage behaviour suite runs against the memory store in the crate's unit
//! tests (`memory::tests`), so plain `cargo test` covers it. With
//! `--features test-suite` it also runs here, through the exported `store_suite!` macro,
//! exactly as an external backend crate instantiates it, with every capability expected:
//! a check the memory store would skip fails here.

// Helpers shared by the tests fail the test on bad input, which is what unwrap is for here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kafka_records::{BatchOptions, NewRecord, RecordBatch, encode_batch};
use kafka_store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_store::{CommittedOffset, LogStore, NewTopic, OffsetStore, TopicConfig, ValidBatch};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

#[cfg(feature = "test-suite")]
async fn harness(test: &'static str) -> kafka_store::suite::Harness {
    use kafka_store::suite::{Capability, Harness};
    let store = Arc::new(MemoryStore::default());
    Harness::new(Arc::clone(&store), test)
        .with_retention(store.clone())
        .with_compaction(store)
        .expecting(Capability::ALL)
}

#[cfg(feature = "test-suite")]
kafka_store::store_suite!(harness);

/// A check that lacks a capability is skipped, with its reason, unless the harness
/// expects the capability; then it fails.
#[cfg(feature = "test-suite")]
#[tokio::test]
async fn missing_capabilities_skip_unless_expected() {
    use kafka_store::suite::{self, Capability, CheckError, Harness};
    let store = Arc::new(MemoryStore::default());
    let bare = Harness::new(Arc::clone(&store), "bare");
    for (check, outcome) in [
        ("retention_by_time", suite::retention_by_time(&bare).await),
        ("retention_by_size", suite::retention_by_size(&bare).await),
        (
            "retention_in_real_time",
            suite::retention_in_real_time(&bare).await,
        ),
    ] {
        match outcome {
            Err(CheckError::Skipped(why)) => assert!(why.contains("Retention"), "{check}: {why}"),
            other => panic!("{check} without a retention driver: {other:?}"),
        }
    }
    let strict = Harness::new(Arc::clone(&store), "strict").expecting(&[
        Capability::RetentionOnDemand,
        Capability::RetentionInRealTime,
    ]);
    assert!(matches!(
        suite::retention_by_time(&strict).await,
        Err(CheckError::Failed(_))
    ));
    assert!(matches!(
        suite::retention_in_real_time(&strict).await,
        Err(CheckError::Failed(_))
    ));
    // run_all reports what it skipped and runs the rest.
    let skipped = suite::run_all(&Harness::new(store, "all")).await.unwrap();
    let names: Vec<&str> = skipped
        .iter()
        .map(|s| s.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "retention_by_time",
            "retention_by_size",
            "retention_in_real_time",
            "compaction_latest_per_key"
        ]
    );
}

/// Checks encoded batches as the broker does before appending them.
fn valid(batches: Vec<Bytes>) -> Vec<ValidBatch> {
    batches
        .iter()
        .map(|b| ValidBatch::from_bytes(b, &kafka_records::DecodeLimits::default()).unwrap())
        .collect()
}

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn batch(timestamp: i64, value: &'static [u8]) -> Bytes {
    let record = NewRecord {
        timestamp,
        key: None,
        value: Some(Bytes::from_static(value)),
        headers: vec![],
    };
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &[record], &mut out).unwrap();
    out.freeze()
}

fn topic(name: &str, config: TopicConfig) -> NewTopic {
    NewTopic {
        name: name.to_owned(),
        partitions: 1,
        config,
    }
}

#[tokio::test]
async fn produce_consume_and_commit_through_trait_objects() {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let log: Arc<dyn LogStore> = store.clone();
    let offsets: Arc<dyn OffsetStore> = store;
    assert_eq!(log.name(), "memory");

    log.create_topic(topic("orders", TopicConfig::default()), false)
        .await
        .unwrap();
    let ts = now_ms();
    let outcome = log
        .append(
            "orders",
            0,
            valid(vec![batch(ts, b"one"), batch(ts, b"two")]),
            ts,
        )
        .await
        .unwrap();
    assert_eq!(outcome.base_offset, 0);

    let read = log.read("orders", 0, 1, 1 << 20).await.unwrap();
    assert_eq!(read.watermarks.high_watermark, 2);
    let values: Vec<Bytes> = read
        .batches
        .iter()
        .flat_map(|b| {
            let batch = RecordBatch::decode(b, &Default::default()).unwrap();
            batch.records().unwrap().map(|r| r.unwrap().value.unwrap())
        })
        .collect();
    assert_eq!(values, vec![Bytes::from_static(b"two")]);

    let committed = CommittedOffset {
        offset: 2,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp: ts,
    };
    offsets
        .commit("billing", vec![("orders".to_owned(), 0, committed.clone())])
        .await
        .unwrap();
    assert_eq!(
        offsets.fetch("billing", "orders", 0).await.unwrap(),
        Some(committed)
    );
}

#[tokio::test(start_paused = true)]
async fn background_retention_runs_until_shutdown() {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        retention_check_interval: Duration::from_millis(100),
        ..MemoryStoreConfig::default()
    }));
    let one_minute = TopicConfig {
        retention_ms: 60_000,
        ..TopicConfig::default()
    };
    store
        .create_topic(topic("events", one_minute), false)
        .await
        .unwrap();
    let hour_ago = now_ms() - 3_600_000;
    store
        .append(
            "events",
            0,
            valid(vec![batch(hour_ago, b"stale"), batch(now_ms(), b"fresh")]),
            now_ms(),
        )
        .await
        .unwrap();

    let (stop, stopped) = watch::channel(false);
    let task = store.spawn_retention(stopped);
    // Paused clock: the runtime advances time to the interval's ticks on its own.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let w = store.watermarks("events", 0).await.unwrap();
    assert_eq!((w.log_start_offset, w.high_watermark), (1, 2));

    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the retention task stops on shutdown")
        .unwrap();
}
