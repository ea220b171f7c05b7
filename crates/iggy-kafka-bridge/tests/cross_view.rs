//! What a native Iggy client sees of records produced through the bridge and the other
//! way round, and what survives restarts of the bridge and of the Iggy server.
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy::prelude::{
    Consumer, HeaderKey, HeaderValue, Identifier, IggyMessage, MessageClient, PartitionClient,
    Partitioning, PollingStrategy, TopicClient,
};
use iggy_kafka_bridge::mapping::{KEY_HEADER, RECORD_HEADER};
use kafka_records::{BatchOptions, DecodeLimits, Header, NewRecord, RecordBatch, encode_batch};
use kafka_store::{CommittedOffset, LogStore, OffsetStore, TopicConfig};

/// Checks encoded batches as the broker does before appending them.
fn valid(batches: Vec<Bytes>) -> Vec<kafka_store::ValidBatch> {
    kafka_store::suite::valid(batches).unwrap()
}
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};
use support::Server;

fn batch(records: &[NewRecord]) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), records, &mut out).unwrap();
    out.freeze()
}

use support::{create, native_client};

fn records_of(bytes: &Bytes) -> Vec<kafka_records::Record> {
    RecordBatch::decode(bytes, &DecodeLimits::default())
        .unwrap()
        .records()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_iggy_view_of_kafka_records() {
    let Some(bin) = support::server_bin("native_iggy_view_of_kafka_records") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("xview-{}", support::run_id());
    create(&bridge, &topic, 1).await;
    let native = NewRecord {
        timestamp: 1_700_000_000_000,
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"value")),
        headers: vec![Header::new(
            Bytes::from_static(b"a"),
            Some(Bytes::from_static(b"1")),
        )],
    };
    let tombstone = NewRecord {
        timestamp: 1_700_000_000_001,
        key: Some(Bytes::from_static(b"k")),
        value: None,
        headers: vec![],
    };
    let sent = batch(&[native, tombstone]);
    bridge
        .append(&topic, 0, valid(vec![sent.clone()]), 0)
        .await
        .unwrap();

    let client = native_client(&server).await;
    let polled = client
        .poll_messages(
            &Identifier::named("kafka").unwrap(),
            &Identifier::named(&topic).unwrap(),
            Some(0),
            &Consumer::new(Identifier::numeric(0).unwrap()),
            &PollingStrategy::offset(0),
            10,
            false,
        )
        .await
        .unwrap();
    assert_eq!(polled.messages.len(), 2);
    let first = &polled.messages[0];
    assert_eq!(first.payload.as_ref(), b"value");
    let headers = first.user_headers_map().unwrap().unwrap();
    let key = |s: &str| HeaderKey::from_str(s).unwrap();
    assert_eq!(headers[&key(KEY_HEADER)].as_bytes(), b"k");
    assert_eq!(headers[&key("a")].as_bytes(), b"1");
    // First record of its batch, in the shortest encoding: the frame keeps the
    // producer's CRC for reads to reuse.
    let frame = headers[&key(RECORD_HEADER)].as_bytes();
    assert_eq!(frame[1] & 0x06, 0x06, "first-of-batch and CRC flags");
    assert_eq!(frame[frame.len() - 4..], sent[17..21]);
    // The tombstone has no payload Iggy could hold, so it is an envelope.
    let second = polled.messages[1].user_headers_map().unwrap().unwrap();
    assert_eq!(second[&key(RECORD_HEADER)].as_bytes()[1] & 0x01, 0x01);

    // And the other way: a message from a native producer reads as a Kafka record.
    let mut user = BTreeMap::new();
    user.insert(key("trace"), HeaderValue::try_from("t-1").unwrap());
    let mut messages = vec![
        IggyMessage::builder()
            .payload(Bytes::from_static(b"from iggy"))
            .user_headers(user)
            .build()
            .unwrap(),
    ];
    client
        .send_messages(
            &Identifier::named("kafka").unwrap(),
            &Identifier::named(&topic).unwrap(),
            &Partitioning::partition_id(0),
            &mut messages,
        )
        .await
        .unwrap();
    let read = bridge.read(&topic, 0, 2, 1 << 20).await.unwrap();
    assert_eq!(read.watermarks.high_watermark, 3);
    let records = records_of(&read.batches[0]);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].offset, 2);
    assert_eq!(records[0].value.as_deref(), Some(&b"from iggy"[..]));
    assert_eq!(records[0].key, None);
    let headers = records[0].headers.to_vec();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].key.as_ref(), b"trace");
    assert_eq!(headers[0].value.as_deref(), Some(&b"t-1"[..]));
    bridge.close().await;
}

/// The bridge reuses topic descriptions for `metadata_max_age` (an hour here, so only
/// the rules below can make a change visible): changes by other Iggy clients must still
/// show where a Kafka client would notice them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_by_other_iggy_clients_are_seen_despite_the_cache() {
    let Some(bin) = support::server_bin("changes_by_other_iggy_clients_are_seen_despite_the_cache")
    else {
        return;
    };
    let server = Server::start(&bin);
    let mut config = support::config(&server);
    config.metadata_max_age = Duration::from_secs(3600);
    let bridge = iggy_kafka_bridge::IggyBridge::connect(config)
        .await
        .unwrap();
    let topic = format!("cache-{}", support::run_id());
    create(&bridge, &topic, 1).await;
    let record = |v: &'static [u8]| NewRecord {
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(v)),
        headers: vec![],
    };
    let out = bridge
        .append(&topic, 0, valid(vec![batch(&[record(b"a")])]), 0)
        .await
        .unwrap();
    assert_eq!(out.base_offset, 0);
    assert_eq!(bridge.topic(&topic).await.unwrap().unwrap().partitions, 1);

    let client = native_client(&server).await;
    let (s, t) = (
        Identifier::named("kafka").unwrap(),
        Identifier::named(&topic).unwrap(),
    );
    // Appends by a native producer: read at once, and counted by later appends.
    let mut messages = vec![
        IggyMessage::builder()
            .payload(Bytes::from_static(b"native"))
            .build()
            .unwrap(),
    ];
    client
        .send_messages(&s, &t, &Partitioning::partition_id(0), &mut messages)
        .await
        .unwrap();
    let read = bridge.read(&topic, 0, 1, 1 << 20).await.unwrap();
    assert_eq!(read.watermarks.high_watermark, 2);
    assert_eq!(
        records_of(&read.batches[0])[0].value.as_deref(),
        Some(&b"native"[..])
    );
    assert_eq!(
        bridge.watermarks(&topic, 0).await.unwrap().high_watermark,
        2
    );
    let out = bridge
        .append(&topic, 0, valid(vec![batch(&[record(b"b")])]), 0)
        .await
        .unwrap();
    assert_eq!(out.base_offset, 2, "the confirmation, not a cached count");
    // The end of the log reads empty, one past it is out of range.
    let end = bridge.read(&topic, 0, 3, 1 << 20).await.unwrap();
    assert!(end.batches.is_empty());
    assert_eq!(end.watermarks.high_watermark, 3);
    assert!(bridge.read(&topic, 0, 4, 1 << 20).await.is_err());

    // A partition added natively is usable at once: a partition beyond the cached
    // count makes the bridge ask Iggy again.
    client.create_partitions(&s, &t, 1).await.unwrap();
    let out = bridge
        .append(&topic, 1, valid(vec![batch(&[record(b"p1")])]), 0)
        .await
        .unwrap();
    assert_eq!(out.base_offset, 0);
    assert_eq!(bridge.topic(&topic).await.unwrap().unwrap().partitions, 2);

    // A topic deleted natively: the first append fails and drops the description.
    client.delete_topic(&s, &t).await.unwrap();
    assert!(
        bridge
            .append(&topic, 0, valid(vec![batch(&[record(b"c")])]), 0)
            .await
            .is_err()
    );
    assert!(bridge.topic(&topic).await.unwrap().is_none());
    bridge.close().await;
}

/// Sequential reads with small byte limits return the same batches whether they come
/// from read-ahead or straight from Iggy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_serves_what_iggy_would() {
    let Some(bin) = support::server_bin("read_ahead_serves_what_iggy_would") else {
        return;
    };
    let server = Server::start(&bin);
    let ahead = support::bridge(&server).await;
    let mut config = support::config(&server);
    config.read_ahead_bytes = 0;
    let direct = iggy_kafka_bridge::IggyBridge::connect(config.clone())
        .await
        .unwrap();
    // Often too little room for another poll ahead: what was polled is kept alone.
    config.read_ahead_bytes = 3_000;
    let tight = iggy_kafka_bridge::IggyBridge::connect(config)
        .await
        .unwrap();
    let topic = format!("ahead-{}", support::run_id());
    create(&ahead, &topic, 1).await;
    let mut total = 0i64;
    for i in 0..60usize {
        let records: Vec<NewRecord> = (0..1 + i % 7)
            .map(|j| NewRecord {
                timestamp: 1_700_000_000_000 + i64::try_from(j).unwrap(),
                key: (j % 2 == 0).then(|| Bytes::from(format!("k{i}-{j}"))),
                value: Some(Bytes::from(vec![
                    b'a' + (i % 26) as u8;
                    10 + (i * 37 + j) % 200
                ])),
                headers: vec![],
            })
            .collect();
        total += i64::try_from(records.len()).unwrap();
        ahead
            .append(&topic, 0, valid(vec![batch(&records)]), 0)
            .await
            .unwrap();
    }
    for max_bytes in [1usize, 300, 2_000, 1 << 20] {
        let mut seen: Vec<Vec<Bytes>> = Vec::new();
        for store in [&direct, &ahead, &tight] {
            let mut offset = 0;
            let mut batches = Vec::new();
            while offset < total {
                let read = store.read(&topic, 0, offset, max_bytes).await.unwrap();
                assert_eq!(read.watermarks.high_watermark, total);
                assert!(!read.batches.is_empty(), "no progress at {offset}");
                let before = offset;
                for b in &read.batches {
                    let records = records_of(b);
                    offset = records.last().unwrap().offset + 1;
                }
                // A wrong offset in the answer fails here instead of spinning.
                assert!(offset > before, "a read at {before} made no progress");
                batches.extend(read.batches);
            }
            assert_eq!(offset, total);
            seen.push(batches);
        }
        for (name, other) in [("read-ahead", &seen[1]), ("tight read-ahead", &seen[2])] {
            let first_difference = seen[0].iter().zip(other).position(|(a, b)| a != b);
            assert_eq!(
                first_difference, None,
                "{name}: first differing batch, max_bytes {max_bytes}"
            );
            assert_eq!(
                seen[0].len(),
                other.len(),
                "{name}: batches, max_bytes {max_bytes}"
            );
        }
    }
    ahead.close().await;
    direct.close().await;
    tight.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_bridge_restart() {
    let Some(bin) = support::server_bin("committed_offsets_survive_a_bridge_restart") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("restart-{}", support::run_id());
    create(&bridge, &topic, 2).await;
    let committed = CommittedOffset {
        offset: 42,
        leader_epoch: 1,
        metadata: Some("m".into()),
        commit_timestamp: 1_700_000_000_000,
    };
    bridge
        .commit("g1", vec![(topic.clone(), 1, committed.clone())])
        .await
        .unwrap();
    bridge
        .set_topic_config(
            &topic,
            TopicConfig {
                retention_ms: 3_600_000,
                retention_bytes: -1,
                max_message_bytes: 4_096,
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    bridge.close().await;
    drop(bridge);

    let again = support::bridge(&server).await;
    assert_eq!(again.fetch("g1", &topic, 1).await.unwrap(), Some(committed));
    assert_eq!(again.groups().await.unwrap(), vec!["g1".to_owned()]);
    let info = again.topic(&topic).await.unwrap().unwrap();
    assert_eq!(info.config.max_message_bytes, 4_096);
    assert_eq!(info.config.retention_ms, 3_600_000);
    again.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_recovers_after_an_iggy_restart() {
    let Some(bin) = support::server_bin("bridge_recovers_after_an_iggy_restart") else {
        return;
    };
    let mut server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("recover-{}", support::run_id());
    create(&bridge, &topic, 1).await;
    let one = NewRecord {
        timestamp: 1,
        key: None,
        value: Some(Bytes::from_static(b"before")),
        headers: vec![],
    };
    bridge
        .append(&topic, 0, valid(vec![batch(&[one])]), 0)
        .await
        .unwrap();

    tokio::task::block_in_place(|| server.restart());

    let deadline = Instant::now() + Duration::from_secs(60);
    let w = loop {
        match bridge.watermarks(&topic, 0).await {
            Ok(w) => break w,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no recovery: {e}; {}",
                    server.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(w.high_watermark, 1, "the record survives the restart");
    let two = NewRecord {
        timestamp: 2,
        key: None,
        value: Some(Bytes::from_static(b"after")),
        headers: vec![],
    };
    let outcome = bridge
        .append(&topic, 0, valid(vec![batch(&[two])]), 0)
        .await
        .unwrap();
    assert_eq!(outcome.base_offset, 1);
    let read = bridge.read(&topic, 0, 0, 1 << 20).await.unwrap();
    let values: Vec<_> = read
        .batches
        .iter()
        .flat_map(records_of)
        .map(|r| r.value.unwrap())
        .collect();
    assert_eq!(
        values,
        vec![Bytes::from_static(b"before"), Bytes::from_static(b"after")]
    );
    bridge.close().await;
}

#[tokio::test]
async fn connect_fails_clearly_without_a_server() {
    // Runs without a server: a closed port must fail in bounded time, not hang.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = iggy_kafka_bridge::BridgeConfig {
        address: format!("127.0.0.1:{port}"),
        connect_retries: 2,
        retry_interval: Duration::from_millis(50),
        call_timeout: Duration::from_secs(5),
        ..iggy_kafka_bridge::BridgeConfig::new("iggy", "x")
    };
    let started = Instant::now();
    let err = iggy_kafka_bridge::IggyBridge::connect(config)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, iggy_kafka_bridge::BridgeError::Unreachable { .. }),
        "{err}"
    );
    let missing = iggy_kafka_bridge::BridgeConfig::default();
    assert!(matches!(
        iggy_kafka_bridge::IggyBridge::connect(missing)
            .await
            .unwrap_err(),
        iggy_kafka_bridge::BridgeError::Config(_)
    ));
}
