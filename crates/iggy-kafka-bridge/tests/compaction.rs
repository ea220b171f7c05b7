//! Compacted topics on a real Iggy server: a pass reclaims Iggy space while Kafka
//! offsets stay, a restarted gateway serves the same view, and a pass stopped after any
//! of its steps leaves a consistent view. Skipped (with a printed notice) without
//! `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy::prelude::{
    Consumer, Identifier, IggyClient, MessageClient, PollingStrategy, TopicClient,
};
use iggy_kafka_bridge::mapping;
use iggy_kafka_bridge::{IggyBridge, PassStep};
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};
use kafka_store::{LogStore, NewTopic, TopicConfig};
use std::collections::BTreeMap;
use support::Server;

const KEYS: usize = 5;
/// Bytes of each value: 4000 records fill about four 1 MiB segments.
const VALUE_BYTES: usize = 1000;

/// A topic with `cleanup.policy=compact` and 1 MiB Iggy segments.
async fn create_compacted(bridge: &IggyBridge, name: &str) {
    let defaults = TopicConfig::default();
    let mut config = TopicConfig::default();
    config
        .set(&defaults, "cleanup.policy", Some("compact"))
        .unwrap();
    config
        .set(&defaults, "segment.bytes", Some("1048576"))
        .unwrap();
    bridge
        .create_topic(
            NewTopic {
                name: name.into(),
                partitions: 1,
                config,
            },
            false,
        )
        .await
        .unwrap();
}

fn value(key: usize, seq: usize) -> Bytes {
    let mut v = format!("k{key}:{seq}:").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    Bytes::from(v)
}

/// Appends `count` updates cycling over the keys, from sequence number `first`, in
/// batches of 100; returns (offset, key, value) of each in the order written.
async fn write_updates(
    bridge: &IggyBridge,
    topic: &str,
    first: usize,
    count: usize,
) -> Vec<(i64, Bytes, Option<Bytes>)> {
    let mut written = Vec::new();
    let mut seq = first;
    while seq < first + count {
        let n = 100.min(first + count - seq);
        let records: Vec<NewRecord> = (seq..seq + n)
            .map(|s| NewRecord {
                timestamp: 1_700_000_000_000 + s as i64,
                key: Some(Bytes::from(format!("k{}", s % KEYS))),
                value: Some(value(s % KEYS, s)),
                headers: vec![],
            })
            .collect();
        let out = append(bridge, topic, &records).await;
        for (i, r) in records.into_iter().enumerate() {
            written.push((out + i as i64, r.key.unwrap(), r.value));
        }
        seq += n;
    }
    written
}

async fn append(bridge: &IggyBridge, topic: &str, records: &[NewRecord]) -> i64 {
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), records, &mut out).unwrap();
    let valid = kafka_store::suite::valid(vec![out.freeze()]).unwrap();
    bridge.append(topic, 0, valid, 0).await.unwrap().base_offset
}

async fn tombstone(bridge: &IggyBridge, topic: &str, key: usize) -> (i64, Bytes, Option<Bytes>) {
    let k = Bytes::from(format!("k{key}"));
    let record = NewRecord {
        // Now: a tombstone is removed `delete.retention.ms` (1 day) after its time.
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        key: Some(k.clone()),
        value: None,
        headers: vec![],
    };
    (append(bridge, topic, &[record]).await, k, None)
}

/// What a Kafka consumer reading from the log start sees: (offset, key, value).
async fn read_all(bridge: &IggyBridge, topic: &str) -> Vec<(i64, Bytes, Option<Bytes>)> {
    let w = bridge.watermarks(topic, 0).await.unwrap();
    let mut offset = w.log_start_offset;
    let mut out = Vec::new();
    while offset < w.high_watermark {
        let read = bridge.read(topic, 0, offset, 64 << 10).await.unwrap();
        if read.batches.is_empty() {
            // Nothing survives from here to the end, as after Kafka's cleaner.
            break;
        }
        // Where a consumer goes next: past the last batch (a compacted batch keeps its
        // last offset when its last records are gone).
        let mut batches_end = offset;
        for b in &read.batches {
            let batch = RecordBatch::decode(b, &DecodeLimits::default()).unwrap();
            batches_end = batches_end.max(batch.header().last_offset() + 1);
            for r in batch.records().unwrap() {
                let r = r.unwrap();
                let at = batch.header().base_offset + i64::from(r.offset_delta);
                // A Kafka consumer skips what lies before its position.
                if at >= offset {
                    out.push((at, r.key.unwrap(), r.value));
                }
            }
        }
        let next = out.last().map_or(offset, |l| l.0 + 1).max(batches_end);
        // A read that returns batches must move the consumer on (a wrong offset in the
        // answer must fail the test, not spin it).
        assert!(next > offset, "a read at {offset} made no progress");
        offset = next;
    }
    out
}

/// Latest record per key of `written` below `end` (what a pass cleaned), then
/// everything from `end`.
fn compacted_view(
    written: &[(i64, Bytes, Option<Bytes>)],
    end: i64,
) -> Vec<(i64, Bytes, Option<Bytes>)> {
    let mut latest: BTreeMap<Bytes, usize> = BTreeMap::new();
    for (i, w) in written.iter().enumerate().filter(|(_, w)| w.0 < end) {
        latest.insert(w.1.clone(), i);
    }
    let mut keep: Vec<_> = latest.values().map(|i| written[*i].clone()).collect();
    keep.extend(written.iter().filter(|w| w.0 >= end).cloned());
    keep.sort_by_key(|w| w.0);
    keep
}

async fn partition_size(client: &IggyClient, topic: &str) -> (u64, u32, u64) {
    let d = client
        .get_topic(
            &Identifier::named("kafka").unwrap(),
            &Identifier::named(topic).unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    let p = &d.partitions[0];
    (d.size.as_bytes_u64(), p.segments_count, p.messages_count)
}

/// Companion topics of `topic` in the meta stream, by name.
async fn companions(client: &IggyClient, bridge: &IggyBridge, topic: &str) -> Vec<String> {
    let id = bridge.topic(topic).await.unwrap().unwrap().id;
    let prefix = format!("compacted.{id:032x}.");
    let mut names: Vec<String> = client
        .get_topics(&Identifier::named("__kafka_gateway").unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// Every message of partition 0 of `stream`/`topic` as a native Iggy consumer polls
/// them: (Iggy offset, id, message).
async fn poll_native(
    client: &IggyClient,
    stream: &str,
    topic: &str,
) -> Vec<(u64, u128, iggy::prelude::IggyMessage)> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let polled = client
            .poll_messages(
                &Identifier::named(stream).unwrap(),
                &Identifier::named(topic).unwrap(),
                Some(0),
                &Consumer::new(Identifier::numeric(0).unwrap()),
                &PollingStrategy::offset(next),
                1000,
                false,
            )
            .await
            .unwrap();
        let Some(last) = polled.messages.last().map(|m| m.header.offset) else {
            return out;
        };
        next = last + 1;
        out.extend(
            polled
                .messages
                .into_iter()
                .map(|m| (m.header.offset, m.header.id, m)),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_reclaims_iggy_space_and_keeps_offsets() {
    let Some(bin) = support::server_bin("compaction_reclaims_iggy_space_and_keeps_offsets") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let client = support::native_client(&server).await;
    let topic = format!("compact-{}", support::run_id());
    create_compacted(&bridge, &topic).await;
    let mut written = write_updates(&bridge, &topic, 0, 4000).await;
    written.push(tombstone(&bridge, &topic, 4).await);
    let (before, segments, count) = partition_size(&client, &topic).await;
    println!("before compaction: Iggy size_bytes {before}, {segments} segments, {count} messages");
    assert!(
        segments >= 3,
        "1 MiB segments should have rolled: {segments}"
    );

    let report = bridge
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    println!("pass: {report:?}");
    let (after, segments_after, count_after) = partition_size(&client, &topic).await;
    println!(
        "after compaction: Iggy size_bytes {after}, {segments_after} segments, {count_after} messages; companion {} bytes",
        report.companion_bytes
    );
    assert!(report.ran && report.generation == 1);
    assert_eq!(report.end, 4001);
    assert!(
        after < before,
        "partition did not shrink: {before} -> {after}"
    );
    assert!(
        after + report.companion_bytes < before,
        "partition and companion together did not shrink: {before} -> {after} + {}",
        report.companion_bytes
    );
    assert!(bridge.compaction_reclaimed_bytes() > 0);

    // A Kafka consumer from the start: the latest record of each key at its offset.
    let w = bridge.watermarks(&topic, 0).await.unwrap();
    assert_eq!((w.log_start_offset, w.high_watermark), (0, 4001));
    let seen = read_all(&bridge, &topic).await;
    // The tombstone is the last batch (never cleaned); everything before it was.
    assert_eq!(report.cleaned_to, 4000);
    assert_eq!(seen, compacted_view(&written, report.cleaned_to));
    // The latest of each key, and the tombstone of k4 after k4's latest value (the
    // tombstone is in the active batch, so it supersedes nothing yet).
    assert_eq!(seen.len(), KEYS + 1);
    assert_eq!(seen.last().unwrap().2, None, "the tombstone is kept");

    // Timestamp lookups see the compacted view too.
    let first_kept = seen.first().unwrap().0;
    let hit = bridge
        .offset_for_timestamp(&topic, 0, 1_700_000_000_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hit.offset, first_kept);
    let max = bridge.max_timestamp(&topic, 0).await.unwrap().unwrap();
    assert_eq!(max.offset, 4000, "the tombstone has the latest timestamp");

    // New records keep their offsets after the boundary, and a second pass goes to
    // generation 2 and drops generation 1.
    written.extend(write_updates(&bridge, &topic, 4000, 1500).await);
    let seen = read_all(&bridge, &topic).await;
    assert_eq!(seen, compacted_view(&written, report.cleaned_to));
    let second = bridge
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    assert_eq!((second.generation, second.end), (2, 5501));
    assert_eq!(
        second.cleaned_to, 5401,
        "the last batch of 100 is not cleaned"
    );
    let seen = read_all(&bridge, &topic).await;
    assert_eq!(seen, compacted_view(&written, second.cleaned_to));
    let names = companions(&client, &bridge, &topic).await;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".0.2"), "{names:?}");

    // A native Iggy consumer: the partition starts where the deleted segments ended;
    // the companion holds the survivors below the boundary, id = Kafka offset + 1,
    // payload and headers as the bridge wrote them.
    let main = poll_native(&client, "kafka", &topic).await;
    let physical = main.first().unwrap().0;
    assert!(physical > 0, "no segment deleted");
    assert_eq!(main.last().unwrap().0, 5500);
    let companion = poll_native(&client, "__kafka_gateway", &names[0]).await;
    let expected: Vec<_> = compacted_view(&written, second.cleaned_to);
    assert_eq!(companion.len(), expected.len());
    for ((_, id, m), (offset, key, value)) in companion.iter().zip(&expected) {
        assert_eq!(*id, (*offset as u128) + 1);
        let mapped = mapping::from_message(m).unwrap();
        assert_eq!(mapped.record.key.as_ref(), Some(key));
        assert_eq!(&mapped.record.value, value);
        if let Some(v) = value {
            assert_eq!(&m.payload, v, "native form: the payload is the value");
        }
    }
    bridge.close().await;

    // (b) A restarted gateway serves the same view from the meta log.
    let again = support::bridge(&server).await;
    assert_eq!(read_all(&again, &topic).await, expected);
    let w = again.watermarks(&topic, 0).await.unwrap();
    assert_eq!((w.log_start_offset, w.high_watermark), (0, 5501));
    again.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_stopped_after_any_step_leaves_a_consistent_view() {
    let Some(bin) = support::server_bin("a_pass_stopped_after_any_step_leaves_a_consistent_view")
    else {
        return;
    };
    let server = Server::start(&bin);
    let client = support::native_client(&server).await;
    for step in [
        PassStep::CompanionWritten,
        PassStep::Switched,
        PassStep::SegmentsDeleted,
    ] {
        let bridge = support::bridge(&server).await;
        let topic = format!("crash-{step:?}-{}", support::run_id()).to_lowercase();
        create_compacted(&bridge, &topic).await;
        let written = write_updates(&bridge, &topic, 0, 3000).await;
        // A first full pass, so the stopped one has a previous generation to replace.
        let first = bridge
            .compact_partition(&topic, 0, true, None)
            .await
            .unwrap();
        let mut written = written;
        written.extend(write_updates(&bridge, &topic, 3000, 2000).await);
        let stopped = bridge
            .compact_partition(&topic, 0, true, Some(step))
            .await
            .unwrap();
        assert_eq!(stopped.generation, 2);
        // The "crash": the bridge goes away mid-pass; a new one starts.
        drop(bridge);
        let bridge = support::bridge(&server).await;
        let seen = read_all(&bridge, &topic).await;
        let expected = match step {
            PassStep::CompanionWritten => compacted_view(&written, first.cleaned_to),
            _ => compacted_view(&written, stopped.cleaned_to),
        };
        assert_eq!(seen, expected, "after stopping at {step:?}");
        let w = bridge.watermarks(&topic, 0).await.unwrap();
        assert_eq!((w.log_start_offset, w.high_watermark), (0, 5000));
        // The next pass finishes the job and leaves one companion generation.
        written.extend(write_updates(&bridge, &topic, 5000, 100).await);
        let next = bridge
            .compact_partition(&topic, 0, true, None)
            .await
            .unwrap();
        let names = companions(&client, &bridge, &topic).await;
        assert_eq!(names.len(), 1, "after stopping at {step:?}: {names:?}");
        assert!(names[0].ends_with(&format!(".0.{}", next.generation)));
        assert_eq!(
            read_all(&bridge, &topic).await,
            compacted_view(&written, next.cleaned_to),
            "after the next pass following {step:?}"
        );
        bridge.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_cleaner_compacts_partitions_it_leads() {
    let Some(bin) = support::server_bin("the_background_cleaner_compacts_partitions_it_leads")
    else {
        return;
    };
    let server = Server::start(&bin);
    let client = support::native_client(&server).await;
    let mut config = support::config(&server);
    config.cleaner.backoff = std::time::Duration::from_millis(100);
    let bridge = IggyBridge::connect(config).await.unwrap();
    let led = format!("led-{}", support::run_id());
    let other = format!("other-{}", support::run_id());
    create_compacted(&bridge, &led).await;
    create_compacted(&bridge, &other).await;
    let written = write_updates(&bridge, &led, 0, 1000).await;
    write_updates(&bridge, &other, 0, 1000).await;
    let only = led.clone();
    let task = bridge
        .start_compaction(std::sync::Arc::new(move |topic: &str, _| topic == only))
        .expect("log.cleaner.enable is on by default");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while companions(&client, &bridge, &led).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no pass within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The last batch (offsets 900..1000) is the active part.
    assert_eq!(read_all(&bridge, &led).await, compacted_view(&written, 900));
    assert!(
        companions(&client, &bridge, &other).await.is_empty(),
        "a partition this gateway does not lead was compacted"
    );
    assert_eq!(read_all(&bridge, &other).await.len(), 1000);
    bridge.close().await;
    // Closing the bridge ends the task at its next round.
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("the cleaner stops with the bridge")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_delete_expires_the_old_prefix_and_moves_the_log_start() {
    let Some(bin) =
        support::server_bin("compact_delete_expires_the_old_prefix_and_moves_the_log_start")
    else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("compact-delete-{}", support::run_id());
    let defaults = TopicConfig::default();
    let mut config = TopicConfig::default();
    for (name, value) in [
        ("cleanup.policy", "compact,delete"),
        ("retention.ms", "3600000"),
        ("segment.bytes", "1048576"),
    ] {
        config.set(&defaults, name, Some(value)).unwrap();
    }
    bridge
        .create_topic(
            NewTopic {
                name: topic.clone(),
                partitions: 1,
                config,
            },
            false,
        )
        .await
        .unwrap();
    // Record timestamps from 2023: older than retention.ms, except that the active
    // batch (offsets 1900..2000) is never removed by a pass.
    let written = write_updates(&bridge, &topic, 0, 2000).await;
    let report = bridge
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    assert_eq!(report.cleaned_to, 1900);
    let w = bridge.watermarks(&topic, 0).await.unwrap();
    assert_eq!((w.log_start_offset, w.high_watermark), (1900, 2000));
    assert_eq!(
        read_all(&bridge, &topic).await,
        written[1900..].to_vec(),
        "only the active batch is left"
    );
    bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_gateway_follows_the_switch_through_the_meta_log() {
    let Some(bin) = support::server_bin("another_gateway_follows_the_switch_through_the_meta_log")
    else {
        return;
    };
    let server = Server::start(&bin);
    let leader = support::bridge(&server).await;
    let follower = support::bridge(&server).await;
    let topic = format!("follow-{}", support::run_id());
    create_compacted(&leader, &topic).await;
    let mut written = write_updates(&leader, &topic, 0, 3000).await;
    assert_eq!(read_all(&follower, &topic).await, written);
    let first = leader
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    // The follower reads the switch with its next refresh of the topics log.
    let expected = compacted_view(&written, first.cleaned_to);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while read_all(&follower, &topic).await != expected {
        assert!(
            std::time::Instant::now() < deadline,
            "the follower never saw the compacted view"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A second pass deletes the generation the follower knows; its next read finds out
    // and reads the new one, whether or not its refresh came first.
    written.extend(write_updates(&leader, &topic, 3000, 1000).await);
    let second = leader
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    assert_eq!(second.generation, 2);
    // Its log start stays 0 although Iggy's partition now starts past the boundary it
    // knew.
    let w = follower.watermarks(&topic, 0).await.unwrap();
    assert_eq!((w.log_start_offset, w.high_watermark), (0, 4000));
    assert_eq!(
        read_all(&follower, &topic).await,
        compacted_view(&written, second.cleaned_to)
    );
    leader.close().await;
    follower.close().await;
}
