//! The Iggy permission -> Kafka operation mapping, without a server: every Kafka
//! operation against every Iggy permission flag at every level, written out as the
//! expected table rather than derived from the code under test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Grants, StreamNames};
use crate::config::TopicMap;
use iggy_common::{GlobalPermissions, Permissions, StreamPermissions, TopicPermissions};
use kafka_authz::{
    AclBindingFilter, Operation, PatternType, Permission, READ_ONLY_HOST, ResourceType,
};
use std::collections::{BTreeMap, HashMap};

/// Topic operations in the order of the letters in the expected strings:
/// R read, W write, C create, X delete, A alter, D describe, d describe configs,
/// a alter configs.
const TOPIC_OPS: [(char, Operation); 8] = [
    ('R', Operation::Read),
    ('W', Operation::Write),
    ('C', Operation::Create),
    ('X', Operation::Delete),
    ('A', Operation::Alter),
    ('D', Operation::Describe),
    ('d', Operation::DescribeConfigs),
    ('a', Operation::AlterConfigs),
];

/// Cluster operations: C create, A alter, D describe, K cluster action, d describe
/// configs, a alter configs, I idempotent write.
const CLUSTER_OPS: [(char, Operation); 7] = [
    ('C', Operation::Create),
    ('A', Operation::Alter),
    ('D', Operation::Describe),
    ('K', Operation::ClusterAction),
    ('d', Operation::DescribeConfigs),
    ('a', Operation::AlterConfigs),
    ('I', Operation::IdempotentWrite),
];

const STREAM_ID: u32 = 7;
const OTHER_STREAM_ID: u32 = 8;
const TOPIC_ID: u32 = 3;
const OTHER_TOPIC_ID: u32 = 4;

/// Stream 7 is `kafka` (the default stream) with topics 3 `orders` and 4 `audit`;
/// stream 8 is `side`, which no Kafka topic maps to, with topic 1 `orders`.
fn names() -> HashMap<u32, StreamNames> {
    HashMap::from([
        (
            STREAM_ID,
            StreamNames {
                name: "kafka".into(),
                topics: HashMap::from([
                    (TOPIC_ID, "orders".to_owned()),
                    (OTHER_TOPIC_ID, "audit".to_owned()),
                ]),
            },
        ),
        (
            OTHER_STREAM_ID,
            StreamNames {
                name: "side".into(),
                topics: HashMap::from([(1, "orders".to_owned())]),
            },
        ),
    ])
}

fn map() -> TopicMap {
    TopicMap::with_default("kafka")
}

fn global(set: impl Fn(&mut GlobalPermissions)) -> Grants {
    let mut p = Permissions::default();
    set(&mut p.global);
    Grants::from_permissions(Some(&p), &names())
}

fn on_stream(stream: u32, set: impl Fn(&mut StreamPermissions)) -> Grants {
    let mut s = StreamPermissions::default();
    set(&mut s);
    let p = Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([(stream as usize, s)])),
    };
    Grants::from_permissions(Some(&p), &names())
}

fn on_topic(topic: u32, set: impl Fn(&mut TopicPermissions)) -> Grants {
    let mut t = TopicPermissions::default();
    set(&mut t);
    let p = Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([(
            STREAM_ID as usize,
            StreamPermissions {
                topics: Some(BTreeMap::from([(topic as usize, t)])),
                ..StreamPermissions::default()
            },
        )])),
    };
    Grants::from_permissions(Some(&p), &names())
}

/// The letters of the topic operations `grants` allows on Kafka topic `topic`.
fn topic_letters(grants: &Grants, topic: &str) -> String {
    TOPIC_OPS
        .iter()
        .filter(|(_, op)| grants.allows(&map(), *op, ResourceType::Topic, topic))
        .map(|(c, _)| *c)
        .collect()
}

fn cluster_letters(grants: &Grants, map: &TopicMap) -> String {
    CLUSTER_OPS
        .iter()
        .filter(|(_, op)| grants.allows(map, *op, ResourceType::Cluster, "kafka-cluster"))
        .map(|(c, _)| *c)
        .collect()
}

type GlobalFlag = fn(&mut GlobalPermissions);

const GLOBAL_FLAGS: [(&str, GlobalFlag, &str, &str); 10] = [
    // (flag, setter, topic ops on any topic, cluster ops)
    // CLUSTER_ACTION (K) is what gateways send each other: never from an Iggy permission.
    ("manage_servers", |g| g.manage_servers = true, "", "ADda"),
    ("read_servers", |g| g.read_servers = true, "", "Dd"),
    ("manage_users", |g| g.manage_users = true, "", ""),
    ("read_users", |g| g.read_users = true, "", ""),
    (
        "manage_streams",
        |g| g.manage_streams = true,
        "RWCXADda",
        "CI",
    ),
    ("read_streams", |g| g.read_streams = true, "RDd", ""),
    (
        "manage_topics",
        |g| g.manage_topics = true,
        "RWCXADda",
        "CI",
    ),
    ("read_topics", |g| g.read_topics = true, "RDd", ""),
    ("poll_messages", |g| g.poll_messages = true, "RDd", ""),
    ("send_messages", |g| g.send_messages = true, "WDd", "I"),
];

#[test]
fn global_permissions_cover_every_topic_and_the_cluster() {
    for (flag, set, topic_ops, cluster_ops) in GLOBAL_FLAGS {
        let grants = global(set);
        for topic in ["orders", "not-created-yet"] {
            assert_eq!(
                topic_letters(&grants, topic),
                topic_ops,
                "{flag} on {topic}"
            );
        }
        assert_eq!(cluster_letters(&grants, &map()), cluster_ops, "{flag}");
    }
}

type StreamFlag = fn(&mut StreamPermissions);

const STREAM_FLAGS: [(&str, StreamFlag, &str, &str); 6] = [
    // (flag, setter, topic ops in the stream, cluster ops when it is the default stream)
    (
        "manage_stream",
        |s| s.manage_stream = true,
        "RWCXADda",
        "CI",
    ),
    ("read_stream", |s| s.read_stream = true, "RDd", ""),
    (
        "manage_topics",
        |s| s.manage_topics = true,
        "RWCXADda",
        "CI",
    ),
    ("read_topics", |s| s.read_topics = true, "RDd", ""),
    ("poll_messages", |s| s.poll_messages = true, "RDd", ""),
    ("send_messages", |s| s.send_messages = true, "WDd", "I"),
];

#[test]
fn stream_permissions_cover_the_topics_of_that_stream_only() {
    for (flag, set, topic_ops, cluster_ops) in STREAM_FLAGS {
        let grants = on_stream(STREAM_ID, set);
        // Existing and not yet created topics of the stream alike.
        for topic in ["orders", "audit", "not-created-yet"] {
            assert_eq!(
                topic_letters(&grants, topic),
                topic_ops,
                "{flag} on {topic}"
            );
        }
        assert_eq!(cluster_letters(&grants, &map()), cluster_ops, "{flag}");

        // The same permission on a stream no Kafka topic maps to governs nothing a
        // Kafka client can reach.
        let elsewhere = on_stream(OTHER_STREAM_ID, set);
        assert_eq!(topic_letters(&elsewhere, "orders"), "", "{flag} elsewhere");
        assert_eq!(cluster_letters(&elsewhere, &map()), "", "{flag} elsewhere");
        for (_, op) in TOPIC_OPS {
            assert!(
                !elsewhere.allows_any(&map(), op, ResourceType::Topic),
                "{flag} elsewhere: any topic {op:?}"
            );
        }
    }
}

type TopicFlag = fn(&mut TopicPermissions);

const TOPIC_FLAGS: [(&str, TopicFlag, &str, &str); 4] = [
    // (flag, setter, ops on that topic, cluster ops)
    ("manage_topic", |t| t.manage_topic = true, "RWXADda", "I"),
    ("read_topic", |t| t.read_topic = true, "RDd", ""),
    ("poll_messages", |t| t.poll_messages = true, "RDd", ""),
    ("send_messages", |t| t.send_messages = true, "WDd", "I"),
];

#[test]
fn topic_permissions_cover_that_topic_only() {
    for (flag, set, topic_ops, cluster_ops) in TOPIC_FLAGS {
        let grants = on_topic(TOPIC_ID, set);
        assert_eq!(topic_letters(&grants, "orders"), topic_ops, "{flag}");
        assert_eq!(topic_letters(&grants, "audit"), "", "{flag} on audit");
        assert_eq!(topic_letters(&grants, "new"), "", "{flag} on a new topic");
        assert_eq!(cluster_letters(&grants, &map()), cluster_ops, "{flag}");
    }
}

#[test]
fn no_permissions_refuse_what_iggy_governs_and_leave_the_rest() {
    for grants in [
        Grants::none(),
        Grants::from_permissions(None, &names()),
        global(|_| {}),
    ] {
        assert_eq!(topic_letters(&grants, "orders"), "");
        assert_eq!(cluster_letters(&grants, &map()), "");
        for (_, op) in TOPIC_OPS {
            assert!(!grants.allows_any(&map(), op, ResourceType::Topic));
        }
        for rt in [
            ResourceType::Group,
            ResourceType::TransactionalId,
            ResourceType::DelegationToken,
        ] {
            assert!(grants.allows(&map(), Operation::Read, rt, "g"));
            assert!(grants.allows_any(&map(), Operation::Describe, rt));
        }
        assert!(grants.bindings("User:nobody", &map()).is_empty());
    }
}

#[test]
fn root_is_allowed_everything() {
    let root = Grants::root();
    assert!(root.is_root());
    assert_eq!(topic_letters(&root, "anything"), "RWCXADda");
    assert_eq!(cluster_letters(&root, &map()), "CADKdaI");
    let bindings = root.bindings("User:iggy", &map());
    assert_eq!(bindings.len(), 2);
    assert!(bindings.iter().all(|b| b.operation == Operation::All));
}

#[test]
fn any_topic_checks_find_a_permission_anywhere_reachable() {
    let grants = on_topic(OTHER_TOPIC_ID, |t| t.send_messages = true);
    assert!(grants.allows_any(&map(), Operation::Write, ResourceType::Topic));
    assert!(grants.allows_any(&map(), Operation::Describe, ResourceType::Topic));
    assert!(!grants.allows_any(&map(), Operation::Read, ResourceType::Topic));
    assert!(!grants.allows_any(&map(), Operation::Create, ResourceType::Topic));
    let creator = on_stream(STREAM_ID, |s| s.manage_topics = true);
    assert!(creator.allows_any(&map(), Operation::Create, ResourceType::Topic));
}

#[test]
fn overridden_topics_are_judged_in_the_stream_they_map_to() {
    let map = TopicMap::parse(
        "default_stream = \"kafka\"\n[topics.payments]\nstream = \"side\"\ntopic = \"orders\"\n",
    )
    .unwrap();
    let grants = on_stream(OTHER_STREAM_ID, |s| s.poll_messages = true);
    assert!(grants.allows(&map, Operation::Read, ResourceType::Topic, "payments"));
    assert!(!grants.allows(&map, Operation::Read, ResourceType::Topic, "orders"));
    assert!(grants.allows_any(&map, Operation::Read, ResourceType::Topic));
    // CREATE on the cluster is about the default stream.
    let manager = on_stream(OTHER_STREAM_ID, |s| s.manage_topics = true);
    assert!(!manager.allows(
        &map,
        Operation::Create,
        ResourceType::Cluster,
        "kafka-cluster"
    ));
    assert!(manager.allows(&map, Operation::Create, ResourceType::Topic, "payments"));

    // Rendered on the Kafka topic that maps there.
    let bindings = grants.bindings("User:alice", &map);
    let names: Vec<(&str, Operation)> = bindings
        .iter()
        .map(|b| (b.name.as_str(), b.operation))
        .collect();
    assert_eq!(
        names,
        vec![
            ("payments", Operation::Read),
            ("payments", Operation::Describe),
            ("payments", Operation::DescribeConfigs),
        ]
    );
}

#[test]
fn permissions_on_ids_iggy_no_longer_has_are_dropped() {
    let p = Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([
            (
                99,
                StreamPermissions {
                    send_messages: true,
                    ..StreamPermissions::default()
                },
            ),
            (
                STREAM_ID as usize,
                StreamPermissions {
                    topics: Some(BTreeMap::from([(
                        77,
                        TopicPermissions {
                            send_messages: true,
                            ..TopicPermissions::default()
                        },
                    )])),
                    ..StreamPermissions::default()
                },
            ),
        ])),
    };
    let grants = Grants::from_permissions(Some(&p), &names());
    assert!(!grants.allows_any(&map(), Operation::Write, ResourceType::Topic));
    assert!(grants.bindings("User:a", &map()).is_empty());
}

#[test]
fn bindings_show_each_level_on_its_resource() {
    let p = Permissions {
        global: GlobalPermissions {
            read_servers: true,
            ..GlobalPermissions::default()
        },
        streams: Some(BTreeMap::from([(
            STREAM_ID as usize,
            StreamPermissions {
                poll_messages: true,
                topics: Some(BTreeMap::from([(
                    TOPIC_ID as usize,
                    TopicPermissions {
                        send_messages: true,
                        ..TopicPermissions::default()
                    },
                )])),
                ..StreamPermissions::default()
            },
        )])),
    };
    let grants = Grants::from_permissions(Some(&p), &names());
    let bindings = grants.bindings("User:alice", &map());
    let mut seen: Vec<(ResourceType, &str, Operation)> = bindings
        .iter()
        .map(|b| (b.resource_type, b.name.as_str(), b.operation))
        .collect();
    seen.sort();
    let mut expected = vec![
        // The default stream's poll_messages: every topic.
        (ResourceType::Topic, "*", Operation::Read),
        (ResourceType::Topic, "*", Operation::Describe),
        (ResourceType::Topic, "*", Operation::DescribeConfigs),
        // orders' send_messages.
        (ResourceType::Topic, "orders", Operation::Write),
        (ResourceType::Topic, "orders", Operation::Describe),
        (ResourceType::Topic, "orders", Operation::DescribeConfigs),
        (ResourceType::Cluster, "kafka-cluster", Operation::Describe),
        (
            ResourceType::Cluster,
            "kafka-cluster",
            Operation::DescribeConfigs,
        ),
        (
            ResourceType::Cluster,
            "kafka-cluster",
            Operation::IdempotentWrite,
        ),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    for b in &bindings {
        assert_eq!(b.principal, "User:alice");
        assert_eq!(b.host, READ_ONLY_HOST);
        assert_eq!(b.pattern, PatternType::Literal);
        assert_eq!(b.permission, Permission::Allow);
        assert!(b.validate().is_ok(), "{b:?}");
    }
    // A filter selects among them as among stored bindings.
    let filter = AclBindingFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some("orders".into()),
        pattern: Some(PatternType::Match),
        operation: Some(Operation::Write),
        ..AclBindingFilter::any()
    };
    let selected: Vec<_> = bindings.iter().filter(|b| filter.matches(b)).collect();
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].name, "orders");
}
