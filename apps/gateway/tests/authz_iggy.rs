//! Iggy permissions enforced on a real Kafka client, changed in Iggy while it runs.
//!
//! A bridged gateway with a SASL_PLAINTEXT listener (PLAIN checked by logging in to Iggy)
//! and a short `IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS`; an Iggy user made with the Iggy
//! SDK that may send to and poll one topic, with no ACL binding on its topics (its Iggy
//! permissions are the grant) and one on its consumer group. confluent-kafka
//! (`tests/clients/authz/iggy_permissions_confluent.py`) produces and consumes; this
//! harness revokes `poll_messages` with the SDK while the consumer runs (its fetches then
//! fail with TOPIC_AUTHORIZATION_FAILED within the interval) and grants it back (the
//! consumer receives again). Skipped without `IGGY_SERVER_BIN` or the client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use iggy::prelude::{
    Identifier, Permissions, StreamClient, StreamPermissions, TopicClient, TopicCreateOptions,
    TopicPermissions, UserClient, UserStatus,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use support::security::{iggy_root, iggy_runtime};
use support::{Client as KafkaClient, Gateway, IggyServer, run_against, topic_prefix};

const USER: &str = "kafka-tenant";
const PASSWORD: &str = "tenant-secret-1";
const REFRESH_MS: &str = "1000";

const CONFLUENT: KafkaClient = KafkaClient::Python {
    module: "confluent_kafka",
};

/// Poll and/or send on topic `topic` of stream `stream` only.
fn on_topic(stream: u32, topic: u32, poll: bool) -> Permissions {
    Permissions {
        global: Default::default(),
        streams: Some(BTreeMap::from([(
            stream as usize,
            StreamPermissions {
                topics: Some(BTreeMap::from([(
                    topic as usize,
                    TopicPermissions {
                        poll_messages: poll,
                        send_messages: true,
                        ..TopicPermissions::default()
                    },
                )])),
                ..StreamPermissions::default()
            },
        )])),
    }
}

/// Makes the gateway's stream with `topics` (one partition each) and the user allowed to
/// send to and poll the first; returns the stream's and the first topic's ids.
fn prepare_iggy(address: &str, topics: &[&str]) -> (u32, u32) {
    iggy_runtime().block_on(async {
        let root = iggy_root(address).await;
        let stream = match root.get_stream(&Identifier::named("kafka").unwrap()).await {
            Ok(Some(s)) => s.id,
            _ => root.create_stream("kafka").await.expect("create stream").id,
        };
        let mut first = None;
        for name in topics {
            let t = root
                .create_topic(
                    &Identifier::numeric(stream).unwrap(),
                    name,
                    &TopicCreateOptions {
                        partitions_count: Some(1),
                        ..TopicCreateOptions::default()
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("create topic {name}: {e}"));
            first.get_or_insert(t.id);
        }
        let topic = first.expect("a topic");
        root.create_user(
            USER,
            PASSWORD,
            UserStatus::Active,
            Some(on_topic(stream, topic, true)),
        )
        .await
        .expect("create the Iggy user");
        (stream, topic)
    })
}

fn set_poll(address: &str, stream: u32, topic: u32, poll: bool) {
    iggy_runtime().block_on(async {
        iggy_root(address)
            .await
            .update_permissions(
                &Identifier::named(USER).unwrap(),
                Some(on_topic(stream, topic, poll)),
            )
            .await
            .expect("update the Iggy user's permissions");
    });
}

fn wait_for(dir: &Path, mark: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !dir.join(mark).exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
fn confluent_kafka_under_changing_iggy_permissions() {
    let name = "confluent_kafka_under_changing_iggy_permissions";
    if !support::require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = support::iggy_server_bin(name) else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let prefix = topic_prefix(name);
    let topic = format!("{prefix}-granted");
    let other = format!("{prefix}-other");
    let (stream_id, topic_id) = prepare_iggy(&iggy.address, &[&topic, &other]);

    let bridge = support::bridge_env(&iggy);
    let mut env: Vec<(&str, &str)> = bridge.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let super_user = format!("User:{}", test_support::IGGY_USER);
    env.extend_from_slice(&[
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
        ("IGGY_KAFKA_SUPER_USERS", super_user.as_str()),
        ("IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS", REFRESH_MS),
    ]);
    let gateway = Gateway::start(&env);
    assert!(
        gateway.output(200).contains("Iggy permissions enforced"),
        "no start-up line about Iggy permissions:\n{}",
        gateway.output(60)
    );

    let state = test_support::scratch_dir("authz-iggy");
    let address = iggy.address.clone();
    let marks = state.clone();
    // Changes the user's permissions when the client asks for it.
    let harness = std::thread::spawn(move || {
        if !wait_for(&marks, "consumed", Duration::from_secs(120)) {
            return;
        }
        set_poll(&address, stream_id, topic_id, false);
        std::fs::write(marks.join("revoked"), "1").unwrap();
        if !wait_for(&marks, "denied", Duration::from_secs(120)) {
            return;
        }
        set_poll(&address, stream_id, topic_id, true);
        std::fs::write(marks.join("granted"), "1").unwrap();
    });
    let state_dir = state.display().to_string();
    run_against(
        &gateway,
        name,
        CONFLUENT,
        "tests/clients/authz/iggy_permissions_confluent.py",
        &[
            ("TOPIC", topic.as_str()),
            ("OTHER_TOPIC", other.as_str()),
            ("ADMIN_USER", test_support::IGGY_USER),
            ("ADMIN_PASSWORD", test_support::IGGY_PASSWORD),
            ("USER_NAME", USER),
            ("USER_PASSWORD", PASSWORD),
            ("STATE_DIR", state_dir.as_str()),
            ("REFRESH_MS", REFRESH_MS),
        ],
        &prefix,
        Duration::from_secs(150),
    );
    harness.join().unwrap();
    let _ = std::fs::remove_dir_all(&state);
    drop(gateway);
    drop(iggy);
}

/// A user who may manage topics in the default stream only, and a topic map routing one
/// topic into another stream: CREATE of that topic is refused, and Iggy's other stream
/// stays without it (hole 4 of issue 53: the cluster grant used to let the gateway create
/// it there with its own account).
#[test]
fn create_is_judged_on_the_stream_a_topic_map_routes_to() {
    let name = "create_is_judged_on_the_stream_a_topic_map_routes_to";
    if !support::require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = support::iggy_server_bin(name) else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let prefix = topic_prefix(name);
    let own = format!("{prefix}-own");
    let routed = format!("{prefix}-routed");
    let other_stream = "other-tenant";
    let default_stream = iggy_runtime().block_on(async {
        let root = iggy_root(&iggy.address).await;
        let default = root.create_stream("kafka").await.expect("stream").id;
        root.create_stream(other_stream).await.expect("stream");
        let manage_default = Permissions {
            global: Default::default(),
            streams: Some(BTreeMap::from([(
                default as usize,
                StreamPermissions {
                    manage_topics: true,
                    read_topics: true,
                    ..StreamPermissions::default()
                },
            )])),
        };
        root.create_user(USER, PASSWORD, UserStatus::Active, Some(manage_default))
            .await
            .expect("create the Iggy user");
        default
    });
    let dir = test_support::scratch_dir("stream-scope");
    let map = dir.join("topics.toml");
    std::fs::write(
        &map,
        format!(
            "default_stream = \"kafka\"\n[topics.\"{routed}\"]\nstream = \"{other_stream}\"\ntopic = \"{routed}\"\n"
        ),
    )
    .unwrap();
    let bridge = support::bridge_env(&iggy);
    let mut env: Vec<(&str, &str)> = bridge.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let map_path = map.display().to_string();
    env.extend_from_slice(&[
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
        ("IGGY_KAFKA_TOPIC_MAP_PATH", map_path.as_str()),
        ("IGGY_KAFKA_IGGY_PERMISSIONS_REFRESH_MS", REFRESH_MS),
    ]);
    let gateway = Gateway::start(&env);
    run_against(
        &gateway,
        name,
        CONFLUENT,
        "tests/clients/authz/iggy_stream_scope_confluent.py",
        &[
            ("USER_NAME", USER),
            ("USER_PASSWORD", PASSWORD),
            ("OWN_TOPIC", own.as_str()),
            ("ROUTED_TOPIC", routed.as_str()),
        ],
        &prefix,
        Duration::from_secs(120),
    );
    // Iggy agrees: the own topic in the default stream, nothing in the other one.
    iggy_runtime().block_on(async {
        let root = iggy_root(&iggy.address).await;
        let own_found = root
            .get_topic(
                &Identifier::numeric(default_stream).unwrap(),
                &Identifier::named(&own).unwrap(),
            )
            .await
            .expect("get topic");
        assert!(own_found.is_some(), "{own} is not in the default stream");
        let stray = root
            .get_topic(
                &Identifier::named(other_stream).unwrap(),
                &Identifier::named(&routed).unwrap(),
            )
            .await
            .expect("get topic");
        assert!(stray.is_none(), "{routed} was created in {other_stream}");
    });
    let _ = std::fs::remove_dir_all(&dir);
    drop(gateway);
    drop(iggy);
}
