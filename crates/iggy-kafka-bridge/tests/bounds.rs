//! The bridge's bounds on a real Iggy server: send queues that make appends wait for
//! room, in order, and refuse them when the wait is over,
//! idempotent retries that land once (also when Iggy stalls mid-send), and metadata logs
//! that are snapshotted, including logs written before snapshots existed (a single
//! `offsets` log, moved into the coordinator shard logs).
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy::prelude::{Identifier, IggyClient, StreamClient, TopicClient, TopicCreateOptions};
use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use kafka_store::{CommittedOffset, LogStore, OffsetStore, StoreError, ValidBatch};
use std::time::Duration;
use support::Server;

fn batch(producer_id: i64, base_sequence: i32, records: usize) -> Vec<ValidBatch> {
    let records: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            value: Some(Bytes::from(format!("v{base_sequence}-{i}"))),
            ..NewRecord::default()
        })
        .collect();
    let options = BatchOptions {
        producer_id,
        producer_epoch: if producer_id >= 0 { 0 } else { -1 },
        base_sequence: if producer_id >= 0 { base_sequence } else { -1 },
        ..BatchOptions::default()
    };
    let mut out = BytesMut::new();
    encode_batch(&options, &records, &mut out).unwrap();
    kafka_store::suite::valid(vec![out.freeze()]).unwrap()
}

fn config(server: &Server) -> BridgeConfig {
    BridgeConfig {
        metadata_max_age: Duration::ZERO,
        meta_stream: format!("meta-{}", support::run_id()),
        ..support::config(server)
    }
}

async fn connect(server: &Server, config: BridgeConfig) -> IggyBridge {
    IggyBridge::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

use support::native_client;

/// The topics of `stream` by name, sorted, with their message counts.
async fn topics_of(client: &IggyClient, stream: &str) -> Vec<(String, u64)> {
    let mut topics: Vec<(String, u64)> = client
        .get_topics(&Identifier::named(stream).unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.messages_count))
        .collect();
    topics.sort();
    topics
}

async fn high_watermark(bridge: &IggyBridge, topic: &str) -> i64 {
    bridge.watermarks(topic, 0).await.unwrap().high_watermark
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_idempotent_batch_lands_once() {
    let Some(bin) = support::server_bin("a_retried_idempotent_batch_lands_once") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = connect(&server, config(&server)).await;
    let topic = format!("retry-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    // Sequential: the retry comes after the first landed.
    let first = bridge.append(&topic, 0, batch(7, 0, 3), 0).await.unwrap();
    let again = bridge.append(&topic, 0, batch(7, 0, 3), 0).await.unwrap();
    assert_eq!(first.base_offset, again.base_offset);
    // Concurrent: the retry joins the batch still queued.
    let a = bridge.submit(&topic, 0, batch(7, 3, 2), 0).await.unwrap();
    let b = bridge.submit(&topic, 0, batch(7, 3, 2), 0).await.unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.base_offset, b.base_offset);
    assert_eq!(a.base_offset, 3);
    // Batches without a producer id are written each time, as Kafka does.
    bridge.append(&topic, 0, batch(-1, 0, 1), 0).await.unwrap();
    bridge.append(&topic, 0, batch(-1, 0, 1), 0).await.unwrap();
    assert_eq!(high_watermark(&bridge, &topic).await, 7);
    bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_send_queue_refuses_appends_and_a_stalled_send_lands_once() {
    let Some(bin) = support::server_bin("a_full_send_queue_refuses_appends") else {
        return;
    };
    let mut server = Server::start(&bin);
    let bridge = connect(
        &server,
        BridgeConfig {
            send_queue_appends: 3,
            send_queue_wait: Duration::from_millis(500),
            call_timeout: Duration::from_secs(1),
            retry_interval: Duration::from_millis(200),
            sessions: 1,
            // Appends during the stall use the description cached before it.
            metadata_max_age: Duration::from_secs(60),
            ..config(&server)
        },
    )
    .await;
    let topic = format!("stall-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    bridge.append(&topic, 0, batch(9, 0, 1), 0).await.unwrap();

    server.pause();
    // The first goes out and stalls; two more wait behind it; the fourth waits for room
    // for `send_queue_wait`, then is refused.
    let mut pending = Vec::new();
    for seq in 1..=3 {
        pending.push(bridge.submit(&topic, 0, batch(9, seq, 1), 0).await.unwrap());
    }
    let started = std::time::Instant::now();
    match bridge.submit(&topic, 0, batch(9, 4, 1), 0).await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("send queue"), "{why}"),
        Err(other) => panic!("expected a full queue, got {other}"),
        Ok(_) => panic!("expected a full queue, got a queued append"),
    }
    assert!(started.elapsed() >= Duration::from_millis(450));
    // The producer gives up waiting on the first (past the bridge's call timeout too)...
    let first = pending.remove(0);
    assert!(
        tokio::time::timeout(Duration::from_secs(3), first)
            .await
            .is_err()
    );
    // ... and retries it while Iggy is still stalled: it joins the send in doubt.
    let retry = bridge.submit(&topic, 0, batch(9, 1, 1), 0).await.unwrap();
    server.resume();
    let landed = tokio::time::timeout(Duration::from_secs(30), retry)
        .await
        .expect("the retry is answered once Iggy is back")
        .unwrap();
    assert_eq!(landed.base_offset, 1);
    for (i, p) in pending.into_iter().enumerate() {
        let done = tokio::time::timeout(Duration::from_secs(30), p)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.base_offset, i64::try_from(i).unwrap() + 2);
    }
    // Each record once: the one before the stall and the three sent during it.
    assert_eq!(high_watermark(&bridge, &topic).await, 4);
    // A retry after it all is answered from what landed.
    let late = bridge.append(&topic, 0, batch(9, 1, 1), 0).await.unwrap();
    assert_eq!(late.base_offset, 1);
    assert_eq!(high_watermark(&bridge, &topic).await, 4);
    bridge.close().await;
}

/// An append that finds its partition's queue full waits for room instead of being
/// refused, and lands after the appends queued before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_waits_for_room_in_a_full_send_queue_and_lands_in_order() {
    // One append fills the partition's queue; the second, to the same partition, waits.
    waits_for_room("an_append_waits_for_room", |c| c.send_queue_appends = 1, 0).await;
}

/// An append that finds the budget over all partitions (`send_buffer_bytes`) taken by
/// another partition's stalled send waits for it instead of being refused, and lands
/// once that send is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_waits_for_the_budget_another_partition_holds() {
    // One append fills its partition's queue and the budget of all of them; the second,
    // to the other partition, finds its own queue empty and waits for the budget.
    let bounds = |c: &mut BridgeConfig| {
        c.send_queue_bytes = 1;
        c.send_buffer_bytes = 1;
    };
    waits_for_room("an_append_waits_for_the_budget", bounds, 1).await;
}

/// With Iggy paused, a first append of 2 records to partition 0 stalls in its send
/// holding what `bounds` allows; a second, of 3 records to `second`, must wait (neither
/// refused nor placed), then both land once Iggy is back.
async fn waits_for_room(name: &str, bounds: fn(&mut BridgeConfig), second: i32) {
    let Some(bin) = support::server_bin(name) else {
        return;
    };
    let mut server = Server::start(&bin);
    let mut config = BridgeConfig {
        send_queue_wait: Duration::from_secs(30),
        sessions: 1,
        // Appends during the stall use the description cached before it.
        metadata_max_age: Duration::from_secs(60),
        ..config(&server)
    };
    bounds(&mut config);
    let bridge = connect(&server, config).await;
    let topic = format!("wait-{}", support::run_id());
    support::create(&bridge, &topic, 2).await;
    for partition in 0..2 {
        bridge
            .append(&topic, partition, batch(-1, 0, 1), 0)
            .await
            .unwrap();
    }

    server.pause();
    let first = bridge.submit(&topic, 0, batch(-1, 0, 2), 0).await.unwrap();
    let other = tokio::spawn({
        let (bridge, topic) = (bridge.clone(), topic.clone());
        async move { bridge.submit(&topic, second, batch(-1, 0, 3), 0).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !other.is_finished(),
        "the second append did not wait for room"
    );
    server.resume();
    let first = tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .expect("the first append is answered once Iggy is back")
        .unwrap();
    let other = tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("the second append gets its place")
        .unwrap()
        .expect("the second append is not refused");
    let other = tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("the second append is answered")
        .unwrap();
    assert_eq!(first.base_offset, 1);
    // Behind the first in the same partition, or first in its own.
    let (offset, end) = if second == 0 { (3, 6) } else { (1, 4) };
    assert_eq!(other.base_offset, offset);
    let w = bridge.watermarks(&topic, second).await.unwrap();
    assert_eq!(w.high_watermark, end);
    bridge.close().await;
}

fn committed(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 1,
        metadata: None,
        commit_timestamp: 1_700_000_000_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_logs_are_snapshotted_and_read_back_from_the_snapshot() {
    let Some(bin) = support::server_bin("meta_logs_are_snapshotted") else {
        return;
    };
    let server = Server::start(&bin);
    let config = BridgeConfig {
        meta_snapshot_records: 100,
        ..config(&server)
    };
    let meta = config.meta_stream.clone();
    let bridge = connect(&server, config.clone()).await;
    let topic = format!("snap-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    for i in 0..350 {
        bridge
            .commit("g", vec![(topic.clone(), i % 5, committed(i64::from(i)))])
            .await
            .unwrap();
    }
    let client = native_client(&server).await;
    // Group "g" lives in its coordinator shard's log.
    let base = format!("groups.{}", kafka_store::cluster::group_shard("g"));
    // One generation left, past the first, holding a snapshot (5 records and a marker)
    // and fewer than 100 records after it.
    let (log, messages) = support::settled_generation(&client, &meta, &base).await;
    assert!(log.starts_with(&format!("{base}.")), "{log}");
    assert!(messages <= 106, "{log}: {messages}");
    bridge.close().await;
    drop(bridge);

    let again = connect(&server, config).await;
    let all = again.fetch_all("g").await.unwrap();
    assert_eq!(all.len(), 5);
    for (t, p, c) in all {
        assert_eq!(t, topic);
        assert_eq!(c.offset, i64::from(345 + p));
    }
    again.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_meta_log_from_before_snapshots_is_read_and_snapshotted() {
    let Some(bin) = support::server_bin("a_meta_log_from_before_snapshots") else {
        return;
    };
    let server = Server::start(&bin);
    let config = BridgeConfig {
        meta_snapshot_records: 100,
        ..config(&server)
    };
    let meta = config.meta_stream.clone();
    // The logs as an earlier version wrote them: `offsets` and `topics`, no markers.
    let client = native_client(&server).await;
    client.create_stream(&meta).await.unwrap();
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        ..TopicCreateOptions::default()
    };
    let s = Identifier::named(&meta).unwrap();
    for log in ["offsets", "topics"] {
        client.create_topic(&s, log, &options).await.unwrap();
    }
    let payloads = (0..300)
        .map(|i| {
            format!(
                r#"{{"g":"old-{}","t":"t","p":0,"o":{i},"e":0,"m":null,"ts":5}}"#,
                i % 3
            )
            .into_bytes()
        })
        .collect();
    support::send_raw(&client, &meta, "offsets", payloads).await;

    let bridge = connect(&server, config.clone()).await;
    let expect = |g: usize| Some(committed_like(297 + i64::try_from(g).unwrap()));
    for g in 0..3 {
        assert_eq!(
            bridge.fetch(&format!("old-{g}"), "t", 0).await.unwrap(),
            expect(g)
        );
    }
    // Migrated at connect: the old log is gone, each group's offset is in its shard's
    // log (the groups may share a shard).
    let logs = topics_of(&client, &meta).await;
    assert!(
        !logs
            .iter()
            .any(|(n, _)| n == "offsets" || n.starts_with("offsets.")),
        "{logs:?}"
    );
    for g in 0..3 {
        let base = format!(
            "groups.{}",
            kafka_store::cluster::group_shard(&format!("old-{g}"))
        );
        assert!(logs.iter().any(|(n, c)| *n == base && *c >= 1), "{logs:?}");
    }
    bridge
        .commit("new", vec![("t".into(), 1, committed(1))])
        .await
        .unwrap();
    bridge.close().await;
    drop(bridge);

    let again = connect(&server, config).await;
    for g in 0..3 {
        assert_eq!(
            again.fetch(&format!("old-{g}"), "t", 0).await.unwrap(),
            expect(g)
        );
    }
    assert_eq!(
        again.fetch("new", "t", 1).await.unwrap(),
        Some(committed(1))
    );
    again.close().await;
}

fn committed_like(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 0,
        metadata: None,
        commit_timestamp: 5,
    }
}
