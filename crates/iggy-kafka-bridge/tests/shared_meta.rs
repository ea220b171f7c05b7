//! Several bridges (gateways) on one Iggy server sharing one meta stream: a coordinator
//! shard acquired by another gateway carries the offsets and group states the first
//! wrote, also across the shard's generations; topic settings, SCRAM credentials and
//! ACL bindings written through one reach the other by its refresh; two writers
//! rolling the same logs through several generations lose no acknowledged record; a
//! roll whose roller died after its seal is finished by the next writer and the record
//! after the seal is not part of the log; a legacy `offsets` log is moved into the
//! shard logs even by two gateways starting at once; unreadable and oversized records
//! in a shard log are skipped. Skipped (with a printed notice) without
//! `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::Bytes;
use iggy::prelude::{Identifier, IggyClient, StreamClient, TopicClient, TopicCreateOptions};
use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_authz::store::AclStore;
use kafka_authz::{AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType};
use kafka_sasl::{ScramCredential, ScramCredentialStore, ScramMechanism};
use kafka_store::cluster::group_shard;
use kafka_store::{CommittedOffset, LogStore, OffsetStore, TopicConfig};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::Server;

fn server_for(name: &str) -> Option<Server> {
    support::server_bin(name).map(|bin| Server::start(&bin))
}

/// Settings of every bridge on `meta`: topic descriptions never reused, so what a
/// bridge reports comes from its meta state.
fn config(server: &Server, meta: &str) -> BridgeConfig {
    BridgeConfig {
        meta_stream: meta.to_owned(),
        metadata_max_age: Duration::ZERO,
        ..support::config(server)
    }
}

/// [`config`] with snapshots every 100 records, so a test passes through generations.
fn rolling_often(server: &Server, meta: &str) -> BridgeConfig {
    BridgeConfig {
        meta_snapshot_records: 100,
        ..config(server, meta)
    }
}

async fn connect(server: &Server, config: BridgeConfig) -> IggyBridge {
    IggyBridge::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

fn committed(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 3,
        metadata: Some("m".into()),
        commit_timestamp: 1_700_000_000_000 + offset,
    }
}

/// Two groups in one shard.
fn two_groups_of_one_shard() -> (String, String, u32) {
    let a = format!("group-a-{}", support::run_id());
    let shard = group_shard(&a);
    let b = (0..)
        .map(|i| format!("group-b-{i}-{}", support::run_id()))
        .find(|g| group_shard(g) == shard)
        .unwrap();
    (a, b, shard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_acquired_by_another_gateway_carries_offsets_and_group_states() {
    let Some(server) = server_for("a_shard_acquired_by_another_gateway") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let a = connect(&server, config(&server, &meta)).await;
    let b = connect(&server, config(&server, &meta)).await;
    let (g1, g2, shard) = two_groups_of_one_shard();

    // B read the shard before A wrote: its view is stale until it acquires again.
    b.acquire_shard(shard).await.unwrap();
    assert_eq!(b.fetch(&g1, "t", 0).await.unwrap(), None);

    a.acquire_shard(shard).await.unwrap();
    a.commit(
        &g1,
        vec![
            ("t".into(), 0, committed(10)),
            ("t".into(), 1, committed(11)),
        ],
    )
    .await
    .unwrap();
    a.commit(&g1, vec![("t".into(), 0, committed(12))])
        .await
        .unwrap();
    a.commit(&g2, vec![("u".into(), 0, committed(5))])
        .await
        .unwrap();
    a.put_group_state(&g1, Some(Bytes::from_static(b"gen-7")))
        .await
        .unwrap();
    a.put_group_state(&g2, Some(Bytes::from_static(b"gen-1")))
        .await
        .unwrap();
    a.put_group_state(&g2, None).await.unwrap();
    a.delete(&g1, &[("t".into(), 1)]).await.unwrap();
    a.release_shard(shard).await;
    assert!(!a.groups().await.unwrap().contains(&g1), "released");

    b.acquire_shard(shard).await.unwrap();
    assert_eq!(
        b.fetch_all(&g1).await.unwrap(),
        vec![("t".to_owned(), 0, committed(12))]
    );
    assert_eq!(b.fetch(&g2, "u", 0).await.unwrap(), Some(committed(5)));
    let states: Vec<(String, Bytes)> = b
        .group_states(shard)
        .await
        .unwrap()
        .into_iter()
        .filter(|(g, _)| *g == g1 || *g == g2)
        .collect();
    assert_eq!(states, vec![(g1.clone(), Bytes::from_static(b"gen-7"))]);
    let groups = b.groups().await.unwrap();
    assert!(groups.contains(&g1) && groups.contains(&g2), "{groups:?}");

    // B coordinates now; A takes the shard back and continues from B's writes.
    b.commit(&g1, vec![("t".into(), 0, committed(20))])
        .await
        .unwrap();
    b.put_group_state(&g1, Some(Bytes::from_static(b"gen-8")))
        .await
        .unwrap();
    b.release_shard(shard).await;
    a.acquire_shard(shard).await.unwrap();
    assert_eq!(a.fetch(&g1, "t", 0).await.unwrap(), Some(committed(20)));
    assert!(
        a.group_states(shard)
            .await
            .unwrap()
            .contains(&(g1.clone(), Bytes::from_static(b"gen-8")))
    );
    // A third gateway started later reads the same, and lists the group without
    // acquiring anything (a gateway alone).
    let c = connect(&server, config(&server, &meta)).await;
    assert!(c.groups().await.unwrap().contains(&g1));
    assert_eq!(c.fetch(&g1, "t", 0).await.unwrap(), Some(committed(20)));
    a.close().await;
    b.close().await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_rolled_through_generations_is_read_whole_by_the_next_coordinator() {
    let Some(server) = server_for("a_shard_rolled_through_generations") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let small = rolling_often(&server, &meta);
    let a = connect(&server, small.clone()).await;
    let b = connect(&server, small).await;
    let (g1, g2, shard) = two_groups_of_one_shard();
    b.acquire_shard(shard).await.unwrap();
    a.acquire_shard(shard).await.unwrap();
    // 300 writes over 2 groups, 4 partitions and 2 states: the tail passes 100 often.
    for i in 0..300i64 {
        let g = if i % 2 == 0 { &g1 } else { &g2 };
        let p = i32::try_from(i % 4).unwrap();
        a.commit(g, vec![("t".into(), p, committed(i))])
            .await
            .unwrap();
        if i % 10 == 0 {
            a.put_group_state(g, Some(Bytes::from(i.to_string())))
                .await
                .unwrap();
        }
    }
    a.put_group_state(&g2, None).await.unwrap();
    let client = support::native_client(&server).await;
    let base = format!("groups.{shard}");
    let generations = support::generations(&client, &meta, &base).await;
    assert!(
        generations.iter().any(|(n, _)| *n != base),
        "no roll happened: {generations:?}"
    );
    a.release_shard(shard).await;
    // B read the shard before any of it: acquiring again catches up across the rolls.
    b.acquire_shard(shard).await.unwrap();
    for (g, parity) in [(&g1, 0i64), (&g2, 1)] {
        let want: Vec<(String, i32, CommittedOffset)> = (0..4)
            .filter_map(|p| {
                let last = (0..300).filter(|i| i % 2 == parity && i % 4 == p).max()?;
                Some(("t".to_owned(), i32::try_from(p).unwrap(), committed(last)))
            })
            .collect();
        assert_eq!(b.fetch_all(g).await.unwrap(), want, "{g}");
    }
    let states: Vec<(String, Bytes)> = b
        .group_states(shard)
        .await
        .unwrap()
        .into_iter()
        .filter(|(g, _)| *g == g1 || *g == g2)
        .collect();
    assert_eq!(states, vec![(g1.clone(), Bytes::from("290"))]);
    a.close().await;
    b.close().await;
}

/// Polls `check` until it holds or `limit` passes; the time it took.
async fn within<F, Fut>(limit: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn credential(fill: u8) -> ScramCredential {
    let mechanism = ScramMechanism::Sha256;
    ScramCredential {
        mechanism,
        salt: vec![fill; 16],
        iterations: 4096,
        stored_key: vec![fill; mechanism.hash_len()],
        server_key: vec![fill ^ 0xff; mechanism.hash_len()],
    }
}

fn binding(name: &str, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        name: name.into(),
        pattern: PatternType::Literal,
        principal: principal.into(),
        host: "*".into(),
        operation: Operation::Read,
        permission: Permission::Allow,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_credentials_and_acls_written_on_one_gateway_reach_the_other() {
    let Some(server) = server_for("settings_credentials_and_acls_reach_the_other") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let a = connect(&server, config(&server, &meta)).await;
    let b = connect(&server, config(&server, &meta)).await;
    // Longest wait accepted: many refresh intervals, for a loaded machine.
    let limit = Duration::from_secs(10);

    let topic = format!("shared-{}", support::run_id());
    support::create(&a, &topic, 1).await;
    let config_set = TopicConfig {
        retention_ms: 3_600_000,
        retention_bytes: -1,
        max_message_bytes: 12_345,
        ..TopicConfig::default()
    };
    a.set_topic_config(&topic, config_set.clone())
        .await
        .unwrap();
    let took = within(limit, || async {
        b.topic(&topic)
            .await
            .unwrap()
            .is_some_and(|t| t.config.max_message_bytes == 12_345)
    })
    .await;
    assert!(took.is_some(), "B never saw the topic setting");
    println!("topic setting visible on B after {took:?}");

    a.scram_store()
        .upsert("carol", credential(7))
        .await
        .unwrap();
    let b_scram = b.scram_store();
    let took = within(limit, || async {
        b_scram
            .credential("carol", ScramMechanism::Sha256)
            .await
            .unwrap()
            == Some(credential(7))
    })
    .await;
    assert!(took.is_some(), "B never saw the SCRAM credential");
    println!("SCRAM credential visible on B after {took:?}");

    a.acl_store(100)
        .add(vec![binding(&topic, "User:carol")])
        .await
        .unwrap();
    let b_acls = b.acl_store(100);
    let took = within(limit, || async {
        b_acls.list(&AclBindingFilter::any()).await.unwrap() == vec![binding(&topic, "User:carol")]
    })
    .await;
    assert!(took.is_some(), "B never saw the ACL binding");
    println!("ACL binding visible on B after {took:?}");

    // And back: B deletes, A sees it gone.
    assert!(
        b_scram
            .delete("carol", ScramMechanism::Sha256)
            .await
            .unwrap()
    );
    let a_scram = a.scram_store();
    assert!(
        within(limit, || async {
            a_scram
                .credential("carol", ScramMechanism::Sha256)
                .await
                .unwrap()
                .is_none()
        })
        .await
        .is_some(),
        "A never saw the deletion"
    );
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_rolling_the_same_logs_lose_nothing() {
    let Some(server) = server_for("two_writers_rolling_the_same_logs") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let small = rolling_often(&server, &meta);
    let a = connect(&server, small.clone()).await;
    let b = connect(&server, small.clone()).await;
    const EACH: usize = 180;
    // Each writer adds its bindings one per write and deletes every third, and sets a
    // SCRAM credential per write: the tails pass 100 several times on both.
    async fn write(bridge: &IggyBridge, who: &str) -> BTreeSet<AclBinding> {
        let acls = bridge.acl_store(100_000);
        let scram = bridge.scram_store();
        let mut kept = BTreeSet::new();
        for i in 0..EACH {
            let b = binding(&format!("t-{i}"), &format!("User:{who}"));
            acls.add(vec![b.clone()]).await.unwrap();
            kept.insert(b.clone());
            if i % 3 == 0 {
                let gone = acls
                    .delete(&AclBindingFilter {
                        name: Some(b.name.clone()),
                        principal: Some(b.principal.clone()),
                        ..AclBindingFilter::any()
                    })
                    .await
                    .unwrap();
                assert_eq!(gone, vec![b.clone()]);
                kept.remove(&b);
            }
            let fill = u8::try_from(i % 200).unwrap();
            scram
                .upsert(&format!("{who}-{}", i % 40), credential(fill))
                .await
                .unwrap();
        }
        kept
    }
    let (kept_a, kept_b) = tokio::join!(write(&a, "a"), write(&b, "b"));
    let expected: BTreeSet<AclBinding> = kept_a.union(&kept_b).cloned().collect();
    assert_eq!(expected.len(), 2 * (EACH - EACH / 3));

    let client = support::native_client(&server).await;
    let acl_generations = support::generations(&client, &meta, "acls").await;
    println!("acls generations after the race: {acl_generations:?}");
    assert!(
        acl_generations.iter().any(|(n, _)| n != "acls"),
        "no roll happened: {acl_generations:?}"
    );

    let fresh = connect(&server, small.clone()).await;
    for (name, bridge) in [("fresh", &fresh), ("a", &a), ("b", &b)] {
        let acls = bridge.acl_store(100_000);
        let seen = within(Duration::from_secs(10), || async {
            acls.list(&AclBindingFilter::any())
                .await
                .unwrap()
                .into_iter()
                .collect::<BTreeSet<_>>()
                == expected
        })
        .await;
        let got: BTreeSet<AclBinding> = acls
            .list(&AclBindingFilter::any())
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert!(
            seen.is_some(),
            "{name}: missing {:?}, extra {:?}",
            expected.difference(&got).collect::<Vec<_>>(),
            got.difference(&expected).collect::<Vec<_>>()
        );
        // The last write of user u: the highest i with i % 40 == u.
        let scram = bridge.scram_store();
        let wanted: Vec<(String, ScramCredential)> = ["a", "b"]
            .iter()
            .flat_map(|who| {
                (0..40).map(move |u| {
                    let last = (0..EACH).filter(|i| i % 40 == u).max().unwrap();
                    let fill = u8::try_from(last % 200).unwrap();
                    (format!("{who}-{u}"), credential(fill))
                })
            })
            .collect();
        let current = || async {
            let mut out = Vec::new();
            for (user, _) in &wanted {
                let c = scram
                    .credential(user, ScramMechanism::Sha256)
                    .await
                    .unwrap();
                out.push((user.clone(), c));
            }
            out
        };
        let want: Vec<(String, Option<ScramCredential>)> = wanted
            .iter()
            .map(|(u, c)| (u.clone(), Some(c.clone())))
            .collect();
        let seen = within(Duration::from_secs(10), || async {
            current().await == want
        })
        .await;
        if seen.is_none() {
            let got = current().await;
            let wrong: Vec<_> = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g != w)
                .map(|(g, _)| &g.0)
                .collect();
            panic!("{name}: SCRAM credentials not as last written: {wrong:?}");
        }
    }
    // The generations left behind go after their grace.
    let (settled, _) = support::settled_generation(&client, &meta, "acls").await;
    assert_ne!(settled, "acls");
    a.close().await;
    b.close().await;
    fresh.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_whose_roller_died_after_the_seal_is_finished_by_the_next_writer() {
    let Some(server) = server_for("a_roll_whose_roller_died") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let a = connect(&server, config(&server, &meta)).await;
    let first = binding("before-seal", "User:a");
    a.acl_store(100).add(vec![first.clone()]).await.unwrap();
    // A roller seals generation 0 naming generation 5 and dies before writing it; a
    // writer's record lands after the seal and that writer dies too (never confirmed).
    let client = support::native_client(&server).await;
    let unconfirmed = binding("after-seal", "User:x");
    let after_seal = serde_json::json!({
        "rt": "TOPIC", "n": unconfirmed.name, "pt": "LITERAL", "p": unconfirmed.principal,
        "h": "*", "op": "READ", "perm": "ALLOW"
    });
    support::send_raw(
        &client,
        &meta,
        "acls",
        vec![
            br#"{"seal":0,"next":5}"#.to_vec(),
            serde_json::to_vec(&after_seal).unwrap(),
        ],
    )
    .await;
    let b = connect(&server, config(&server, &meta)).await;
    let b_acls = b.acl_store(100);
    assert_eq!(
        b_acls.list(&AclBindingFilter::any()).await.unwrap(),
        vec![first.clone()],
        "the record after the seal is not part of the log"
    );
    let second = binding("after-roll", "User:b");
    b_acls.add(vec![second.clone()]).await.unwrap();
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    assert_eq!(b_acls.list(&AclBindingFilter::any()).await.unwrap(), both);
    let a_acls = a.acl_store(100);
    let seen = within(Duration::from_secs(10), || async {
        a_acls.list(&AclBindingFilter::any()).await.unwrap() == both
    })
    .await;
    assert!(
        seen.is_some(),
        "A did not follow into the finished generation"
    );
    let (log, _) = support::settled_generation(&client, &meta, "acls").await;
    assert_eq!(log, "acls.5");
    a.close().await;
    b.close().await;
}

/// Writes the legacy `offsets` log as an earlier version did: generation 0 without
/// markers, `records` commits over three groups.
async fn write_legacy_offsets(client: &IggyClient, meta: &str, records: i64) {
    client.create_stream(meta).await.unwrap();
    let s = Identifier::named(meta).unwrap();
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        ..TopicCreateOptions::default()
    };
    client.create_topic(&s, "offsets", &options).await.unwrap();
    let payloads = (0..records)
        .map(|i| {
            format!(
                r#"{{"g":"legacy-{}","t":"t","p":{},"o":{i},"e":2,"m":null,"ts":9}}"#,
                i % 3,
                i % 2
            )
            .into_bytes()
        })
        .collect();
    support::send_raw(client, meta, "offsets", payloads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_offsets_log_is_moved_into_the_shards_by_gateways_starting_together() {
    let Some(server) = server_for("a_legacy_offsets_log_is_moved") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let client = support::native_client(&server).await;
    write_legacy_offsets(&client, &meta, 60).await;
    // The last offset of (group g, partition p): the highest i < 60 with i % 3 == g and
    // i % 2 == p.
    let last = |g: i64, p: i64| (0..60).filter(|i| i % 3 == g && i % 2 == p).max().unwrap();
    let (a, b) = tokio::join!(
        connect(&server, config(&server, &meta)),
        connect(&server, config(&server, &meta))
    );
    for bridge in [&a, &b] {
        for g in 0..3 {
            let all = bridge.fetch_all(&format!("legacy-{g}")).await.unwrap();
            let want: Vec<(String, i32, CommittedOffset)> = (0..2)
                .map(|p| {
                    (
                        "t".to_owned(),
                        i32::try_from(p).unwrap(),
                        CommittedOffset {
                            offset: last(g, p),
                            leader_epoch: 2,
                            metadata: None,
                            commit_timestamp: 9,
                        },
                    )
                })
                .collect();
            assert_eq!(all, want, "legacy-{g}");
        }
    }
    assert!(
        support::generations(&client, &meta, "offsets")
            .await
            .is_empty(),
        "the legacy log is deleted"
    );
    a.close().await;
    b.close().await;
    // A later start finds the offsets in the shards only.
    let c = connect(&server, config(&server, &meta)).await;
    assert_eq!(
        c.fetch("legacy-1", "t", 0).await.unwrap().map(|c| c.offset),
        Some(last(1, 0))
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_and_oversized_shard_records_are_skipped() {
    let Some(server) = server_for("unreadable_and_oversized_shard_records") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let small = BridgeConfig {
        meta_record_max_bytes: 4096,
        ..config(&server, &meta)
    };
    let a = connect(&server, small.clone()).await;
    let group = format!("hostile-{}", support::run_id());
    let shard = group_shard(&group);
    a.acquire_shard(shard).await.unwrap();
    a.commit(&group, vec![("t".into(), 0, committed(1))])
        .await
        .unwrap();
    // Another party appends junk to the shard's log.
    let client = support::native_client(&server).await;
    let huge_state = format!(r#"{{"g":"{group}","s":"{}"}}"#, "A".repeat(8192));
    let junk: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        br#"{"g":1}"#.to_vec(),
        format!(r#"{{"g":"{group}"}}"#).into_bytes(),
        format!(r#"{{"g":"{group}","s":"***"}}"#).into_bytes(),
        format!(r#"{{"g":"{group}","s":"AA==","x":1}}"#).into_bytes(),
        huge_state.into_bytes(),
        vec![0xff; 100],
        br#"{"seal":"x"}"#.to_vec(),
        br#"{"snapshot_end":99}"#.to_vec(),
        format!(r#"{{"g":"{group}","t":"t","p":0,"o":2,"e":3,"m":"m","ts":1700000000002}}"#)
            .into_bytes(),
    ];
    support::send_raw(&client, &meta, &format!("groups.{shard}"), junk).await;
    // A group state over the bound is refused before it is written.
    let refused = a
        .put_group_state(&group, Some(Bytes::from(vec![1u8; 8192])))
        .await;
    assert!(refused.is_err(), "{refused:?}");

    let b = connect(&server, small).await;
    b.acquire_shard(shard).await.unwrap();
    assert_eq!(b.fetch(&group, "t", 0).await.unwrap(), Some(committed(2)));
    assert!(
        !b.group_states(shard)
            .await
            .unwrap()
            .iter()
            .any(|(g, _)| *g == group),
        "no readable state was written"
    );
    // A catches up the same way.
    a.acquire_shard(shard).await.unwrap();
    assert_eq!(a.fetch(&group, "t", 0).await.unwrap(), Some(committed(2)));
    a.close().await;
    b.close().await;
}
