//! Transactions on a real Iggy server: what a native Iggy consumer sees of one committed
//! and one aborted transaction (every record, flagged, and both markers), the same
//! partition read back through the bridge folding to the right transaction index, and
//! the coordinator's durable records (transaction states, coordinator epochs, pending
//! offsets, the transactional topic flag) found again by a second gateway, across log
//! snapshots and after an Iggy restart, with junk in the shard log skipped; a
//! compaction pass over a transactional topic. Skipped (with a printed notice) without
//! `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy::prelude::{
    Consumer, HeaderKey, HeaderValue, Identifier, IggyMessage, MessageClient, PollingStrategy,
};
use iggy_kafka_bridge::mapping::{
    KEY_HEADER, MARKER_ABORT, MARKER_COMMIT, MARKER_HEADER, RECORD_HEADER, TXN_HEADER,
};
use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use kafka_store::cluster::group_shard;
use kafka_store::txn_index::{AbortedTxn, Marker, marker_batch, scan_index};
use kafka_store::{CommittedOffset, LogStore, OffsetStore, PendingOffsets, ValidBatch};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};
use support::Server;

const COMMITTER: i64 = 1001;
const ABORTER: i64 = 2002;

fn transactional(producer_id: i64, sequence: i32, values: &[&str]) -> ValidBatch {
    keyed_transactional(producer_id, sequence, "k", values)
}

fn keyed_transactional(producer_id: i64, sequence: i32, key: &str, values: &[&str]) -> ValidBatch {
    let records: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord {
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![],
        })
        .collect();
    let options = BatchOptions {
        transactional: true,
        producer_id,
        producer_epoch: 4,
        base_sequence: sequence,
        ..BatchOptions::default()
    };
    let mut out = BytesMut::new();
    encode_batch(&options, &records, &mut out).unwrap();
    kafka_store::suite::valid(vec![out.freeze()])
        .unwrap()
        .remove(0)
}

fn plain(value: &str) -> ValidBatch {
    keyed_plain(None, value)
}

fn keyed_plain(key: Option<&str>, value: &str) -> ValidBatch {
    let record = NewRecord {
        timestamp: 1_700_000_000_000,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: vec![],
    };
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &[record], &mut out).unwrap();
    kafka_store::suite::valid(vec![out.freeze()])
        .unwrap()
        .remove(0)
}

fn marker(producer_id: i64, commit: bool) -> ValidBatch {
    marker_batch(
        producer_id,
        4,
        Marker {
            commit,
            coordinator_epoch: 7,
        },
        1_700_000_000_500,
    )
}

fn header(m: &IggyMessage, name: &str) -> Option<HeaderValue> {
    m.user_headers_map()
        .unwrap()
        .unwrap_or_default()
        .get(&HeaderKey::from_str(name).unwrap())
        .cloned()
}

/// The transaction flags a native consumer reads off a message: producer id and marker.
type Flags = (Option<i64>, Option<String>);

fn flags(m: &IggyMessage) -> Flags {
    (
        header(m, TXN_HEADER).map(|v| v.as_int64().unwrap()),
        header(m, MARKER_HEADER).map(|v| String::from_utf8(v.as_bytes().to_vec()).unwrap()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_consumer_sees_every_transactional_record_flagged_and_the_markers() {
    let Some(bin) = support::server_bin(
        "a_native_consumer_sees_every_transactional_record_flagged_and_the_markers",
    ) else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("txn-native-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    assert!(!bridge.is_transactional(&topic).await.unwrap());
    bridge.mark_transactional(&topic).await.unwrap();
    assert!(bridge.is_transactional(&topic).await.unwrap());
    // Another gateway learns of the flag without waiting for its refresh.
    let other = support::bridge(&server).await;
    assert!(other.is_transactional(&topic).await.unwrap());
    other.close().await;

    // 0-1 committed (2 records), 2 aborted, 3 outside, 4 commit marker, 5 abort marker.
    for batch in [
        transactional(COMMITTER, 0, &["c1", "c2"]),
        transactional(ABORTER, 0, &["a1"]),
        plain("p"),
        marker(COMMITTER, true),
        marker(ABORTER, false),
    ] {
        bridge.append(&topic, 0, vec![batch], 0).await.unwrap();
    }

    let client = support::native_client(&server).await;
    let polled = client
        .poll_messages(
            &Identifier::named("kafka").unwrap(),
            &Identifier::named(&topic).unwrap(),
            Some(0),
            &Consumer::new(Identifier::numeric(0).unwrap()),
            &PollingStrategy::offset(0),
            100,
            false,
        )
        .await
        .unwrap();
    let seen: Vec<(Bytes, Flags)> = polled
        .messages
        .iter()
        .map(|m| (m.payload.clone(), flags(m)))
        .collect();
    // Marker value: version 0, coordinator epoch 7.
    let marker_value = Bytes::from_static(&[0, 0, 0, 0, 0, 7]);
    assert_eq!(
        seen,
        vec![
            (Bytes::from_static(b"c1"), (Some(COMMITTER), None)),
            (Bytes::from_static(b"c2"), (Some(COMMITTER), None)),
            (Bytes::from_static(b"a1"), (Some(ABORTER), None)),
            (Bytes::from_static(b"p"), (None, None)),
            (
                marker_value.clone(),
                (Some(COMMITTER), Some(MARKER_COMMIT.to_owned()))
            ),
            (marker_value, (Some(ABORTER), Some(MARKER_ABORT.to_owned()))),
        ],
        "every record is there, flagged by producer, and both markers"
    );
    let commit = &polled.messages[4];
    assert_eq!(
        header(commit, KEY_HEADER).unwrap().as_bytes(),
        &[0, 0, 0, 1],
        "marker key: version 0, type commit"
    );
    let frame = header(commit, RECORD_HEADER).unwrap().as_bytes().to_vec();
    let attributes = i16::from_be_bytes([frame[6], frame[7]]);
    assert_eq!(attributes & 0x30, 0x30, "transactional control batch");

    // A read that starts inside a transactional batch still gets its producer's
    // transactional batch, so read_committed consumers can filter it.
    let read = bridge.read(&topic, 0, 1, 1 << 20).await.unwrap();
    let first = kafka_records::RecordBatch::decode(
        &read.batches[0],
        &kafka_records::DecodeLimits::default(),
    )
    .unwrap();
    let h = first.header();
    assert_eq!(
        (h.base_offset, h.record_count, h.producer_id),
        (1, 1, COMMITTER)
    );
    assert!(h.attributes.is_transactional() && !h.attributes.is_control());

    // Read back through the bridge, the partition folds to one aborted transaction and
    // nothing open.
    let (index, _) = scan_index(&bridge, &topic, 0, 0, 6, 1 << 20).await.unwrap();
    assert_eq!(index.end(), 6);
    assert_eq!(index.first_unstable(), None);
    assert_eq!(
        index.aborted(0, 6),
        vec![AbortedTxn {
            producer_id: ABORTER,
            first_offset: 2,
            last_offset: 5
        }]
    );
    assert!(index.is_aborted(ABORTER, 2));
    assert!(!index.is_aborted(COMMITTER, 0));
    assert_eq!(index.last_marker(COMMITTER), Some((4, 7)));
    bridge.close().await;
}

fn committed(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 2,
        metadata: Some("m".into()),
        commit_timestamp: 1_700_000_000_001,
    }
}

fn meta_config(server: &Server, meta: &str) -> BridgeConfig {
    BridgeConfig {
        meta_stream: meta.to_owned(),
        meta_snapshot_records: 100,
        ..support::config(server)
    }
}

async fn connect(server: &Server, meta: &str) -> IggyBridge {
    IggyBridge::connect(meta_config(server, meta))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

/// A bridge on `meta` once the restarted server answers (within a minute).
async fn reconnect(server: &Server, meta: &str) -> IggyBridge {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match IggyBridge::connect(meta_config(server, meta)).await {
            Ok(bridge) => return bridge,
            Err(e) => {
                assert!(Instant::now() < deadline, "no reconnect: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// What a gateway finds of `shard` after acquiring it.
async fn shard_view(
    bridge: &IggyBridge,
    shard: u32,
) -> (Vec<(String, Bytes)>, Vec<PendingOffsets>) {
    bridge.acquire_shard(shard).await.unwrap();
    (
        bridge.txn_states(shard).await.unwrap(),
        bridge.pending_offsets(shard).await.unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_records_survive_snapshots_a_new_gateway_and_an_iggy_restart() {
    let Some(mut server) = support::server_bin(
        "coordinator_records_survive_snapshots_a_new_gateway_and_an_iggy_restart",
    )
    .map(|bin| Server::start(&bin)) else {
        return;
    };
    let meta = format!("meta-txn-{}", support::run_id());
    let a = connect(&server, &meta).await;
    // Transactional ids and a group of one shard.
    let shard = group_shard("txn-0");
    let ids: Vec<String> = (0..400)
        .map(|i| format!("txn-{i}"))
        .filter(|id| group_shard(id) == shard)
        .take(6)
        .collect();
    let group = (0..400)
        .map(|i| format!("group-{i}"))
        .find(|g| group_shard(g) == shard)
        .unwrap();
    a.acquire_shard(shard).await.unwrap();
    assert_eq!(a.claim_txn_epoch(shard).await.unwrap(), 0);
    assert_eq!(a.claim_txn_epoch(shard).await.unwrap(), 1);
    // Enough writes to roll the shard log (snapshots every 100 records) a few times.
    for round in 0..40u8 {
        for id in &ids {
            a.put_txn_state(id, Some(Bytes::from(vec![round; 3])))
                .await
                .unwrap();
        }
    }
    a.put_txn_state(&ids[0], None).await.unwrap();
    a.put_pending_offsets(&group, 11, vec![("t".into(), 0, committed(5))])
        .await
        .unwrap();
    a.put_pending_offsets(
        &group,
        11,
        vec![("t".into(), 0, committed(6)), ("t".into(), 1, committed(9))],
    )
    .await
    .unwrap();
    a.put_pending_offsets(&group, 12, vec![("t".into(), 2, committed(3))])
        .await
        .unwrap();
    a.put_pending_offsets(&group, 13, vec![("t".into(), 3, committed(4))])
        .await
        .unwrap();
    // 11 commits, 13 aborts, 12 stays open; ending nothing pending writes nothing.
    a.complete_pending_offsets(&group, 11, true).await.unwrap();
    a.complete_pending_offsets(&group, 13, false).await.unwrap();
    a.complete_pending_offsets(&group, 99, true).await.unwrap();
    assert_eq!(a.fetch(&group, "t", 0).await.unwrap(), Some(committed(6)));
    assert_eq!(a.fetch(&group, "t", 1).await.unwrap(), Some(committed(9)));
    assert_eq!(a.fetch(&group, "t", 3).await.unwrap(), None);

    let mut expected_states: Vec<(String, Bytes)> = ids[1..]
        .iter()
        .map(|id| (id.clone(), Bytes::from(vec![39u8; 3])))
        .collect();
    expected_states.sort();
    let expected_pending = vec![PendingOffsets {
        group: group.clone(),
        producer_id: 12,
        offsets: vec![("t".into(), 2, committed(3))],
    }];
    let view = shard_view(&a, shard).await;
    assert_eq!(view, (expected_states.clone(), expected_pending.clone()));
    let client = support::native_client(&server).await;
    let base = format!("groups.{shard}");
    let (current, _) = support::settled_generation(&client, &meta, &base).await;
    assert_ne!(current, base, "the shard log rolled");

    // Junk in the shard log (another party, or a later version) is skipped.
    let junk: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        br#"{"x":"txn-1"}"#.to_vec(),
        br#"{"x":"txn-1","s":"***"}"#.to_vec(),
        br#"{"ce":"nine"}"#.to_vec(),
        br#"{"pg":"g","pid":1,"po":[["t"]]}"#.to_vec(),
        br#"{"pg":"g","pid":"x","po":null}"#.to_vec(),
        vec![0xff; 40],
    ];
    support::send_raw(&client, &meta, &current, junk).await;

    // A second gateway acquiring the shard finds the same, and claims the next epoch.
    let b = connect(&server, &meta).await;
    assert_eq!(
        shard_view(&b, shard).await,
        (expected_states.clone(), expected_pending.clone())
    );
    assert_eq!(b.fetch(&group, "t", 0).await.unwrap(), Some(committed(6)));
    assert_eq!(b.claim_txn_epoch(shard).await.unwrap(), 2);
    b.put_txn_state(&ids[1], Some(Bytes::from_static(b"moved")))
        .await
        .unwrap();
    let mut after_move = expected_states.clone();
    after_move[0].1 = Bytes::from_static(b"moved");
    after_move.sort();
    a.release_shard(shard).await;
    a.close().await;
    b.close().await;
    drop((a, b));

    // After an Iggy restart, a new gateway finds all of it, the epoch included.
    tokio::task::block_in_place(|| server.restart());
    let c = reconnect(&server, &meta).await;
    assert_eq!(shard_view(&c, shard).await, (after_move, expected_pending));
    assert_eq!(c.claim_txn_epoch(shard).await.unwrap(), 3);
    assert_eq!(c.fetch(&group, "t", 1).await.unwrap(), Some(committed(9)));
    // Other shards hold none of it.
    let other = (shard + 1) % kafka_store::cluster::GROUP_SHARDS;
    assert_eq!(shard_view(&c, other).await, (Vec::new(), Vec::new()));
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transactional_flag_survives_settings_rewrites_and_an_iggy_restart() {
    let Some(mut server) = support::server_bin(
        "the_transactional_flag_survives_settings_rewrites_and_an_iggy_restart",
    )
    .map(|bin| Server::start(&bin)) else {
        return;
    };
    let meta = format!("meta-flag-{}", support::run_id());
    let a = connect(&server, &meta).await;
    let topic = format!("txn-flag-{}", support::run_id());
    support::create(&a, &topic, 2).await;
    a.mark_transactional(&topic).await.unwrap();
    // Rewrites of the topic record keep the flag.
    let mut config = a.topic(&topic).await.unwrap().unwrap().config;
    let defaults = config.clone();
    config
        .set(&defaults, "cleanup.policy", Some("compact"))
        .unwrap();
    a.set_topic_config(&topic, config).await.unwrap();
    assert!(a.is_transactional(&topic).await.unwrap());
    a.close().await;
    drop(a);
    tokio::task::block_in_place(|| server.restart());
    let b = reconnect(&server, &meta).await;
    assert!(b.is_transactional(&topic).await.unwrap());
    let unmarked = format!("txn-plain-{}", support::run_id());
    support::create(&b, &unmarked, 1).await;
    assert!(!b.is_transactional(&unmarked).await.unwrap());
    let settings: BTreeMap<_, _> = b
        .topic(&topic)
        .await
        .unwrap()
        .unwrap()
        .config
        .overrides
        .into_iter()
        .collect();
    assert_eq!(
        settings.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_markers_drops_aborted_records_and_stops_at_an_open_transaction() {
    let Some(bin) = support::server_bin(
        "compaction_keeps_markers_drops_aborted_records_and_stops_at_an_open_transaction",
    ) else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let topic = format!("txn-compact-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    let mut config = bridge.topic(&topic).await.unwrap().unwrap().config;
    let defaults = config.clone();
    config
        .set(&defaults, "cleanup.policy", Some("compact"))
        .unwrap();
    bridge.set_topic_config(&topic, config).await.unwrap();
    bridge.mark_transactional(&topic).await.unwrap();
    let (a, b, c) = (31, 32, 33);
    for batch in [
        keyed_plain(Some("k1"), "v1"), // 0 kept: the aborted 1 does not supersede it
        keyed_transactional(a, 0, "k1", &["aborted"]), // 1 aborted: dropped
        keyed_plain(Some("k2"), "v2"), // 2 superseded by 4
        marker(a, false),              // 3 kept
        keyed_transactional(b, 0, "k2", &["committed"]), // 4 kept
        marker(b, true),               // 5 kept
        keyed_transactional(c, 0, "k1", &["open"]), // 6 open: the clean end
        keyed_plain(Some("k2"), "later"), // 7 after it: kept
        keyed_plain(Some("k3"), "active"), // 8 the active batch
    ] {
        bridge.append(&topic, 0, vec![batch], 0).await.unwrap();
    }
    let report = bridge
        .compact_partition(&topic, 0, true, None)
        .await
        .unwrap();
    assert!(report.ran, "{report:?}");
    assert_eq!(
        report.cleaned_to, 6,
        "the pass stops at the open transaction"
    );
    assert_eq!(report.records_removed, 2, "{report:?}");
    let mut offsets = Vec::new();
    let mut next = 0;
    loop {
        let read = bridge.read(&topic, 0, next, 1 << 20).await.unwrap();
        if read.batches.is_empty() {
            break;
        }
        for bytes in &read.batches {
            let batch =
                kafka_records::RecordBatch::decode(bytes, &kafka_records::DecodeLimits::default())
                    .unwrap();
            let control = batch.header().attributes.is_control();
            let producer = batch
                .header()
                .attributes
                .is_transactional()
                .then_some(batch.header().producer_id);
            for r in batch.records().unwrap() {
                let r = r.unwrap();
                let at = batch.header().base_offset + i64::from(r.offset_delta);
                if at >= next {
                    offsets.push((at, control, producer));
                }
            }
        }
        next = offsets.last().map_or(next, |(o, ..)| o + 1);
        if next >= 9 {
            break;
        }
    }
    assert_eq!(
        offsets,
        vec![
            (0, false, None),
            (3, true, Some(a)),
            (4, false, Some(b)),
            (5, true, Some(b)),
            (6, false, Some(c)),
            (7, false, None),
            (8, false, None)
        ],
        "served from the companion, transactional records and markers keep their producer"
    );
    // Read back, the partition still folds to the same transactions.
    let (index, _) = scan_index(&bridge, &topic, 0, 0, 9, 1 << 20).await.unwrap();
    assert_eq!(index.first_unstable(), Some(6));
    assert_eq!(index.open_txn(c), Some(6));
    assert_eq!(index.last_marker(b), Some((4, 7)));
    bridge.close().await;
}
