//! Every real-client suite of `clients.rs` against three gateways on one Iggy.
//!
//! Each test starts an Iggy server and three gateways (node ids 1 to 3, one
//! `IGGY_KAFKA_BROKERS` list naming all three, see `support/trio.rs`), waits until each
//! gateway lists all three in Metadata, and runs one client suite with `BOOTSTRAP` set
//! to the three addresses. The suite's topic prefix is chosen so that its three
//! partitions have three different leaders (placement is a fixed function of the topic
//! name, `kafka_broker::cluster::leader`): the client must take each partition's leader
//! from Metadata, produce, fetch and list offsets there, and create and delete its topic
//! through whichever gateway it reaches. The scripts are the ones `clients.rs` runs
//! against one gateway; every script takes a bootstrap list.
//!
//! The consumer-group scenarios of `tests/clients/groups/` (`groups.rs`) run the same way
//! (`*_groups`): admin APIs on groups (ListGroups, DescribeGroups, offsets, OffsetDelete,
//! DeleteGroups) with every client that has them, consumers resuming from their commits,
//! cooperative and static membership, and a member killed: the group's coordinator is
//! one of the three, its partitions' leaders are spread over all of them.
//!
//! `confluent_kafka_over_sasl_ssl` runs the confluent-kafka security suite against a trio
//! whose gateways each have a `SASL_SSL` listener (named in the broker list), an `SSL`
//! listener requiring client certificates, and a loopback PLAINTEXT listener the harness
//! uses to see that the three know one another: PLAIN through Iggy's users, SCRAM-SHA-256
//! and -512 with credentials created through one gateway and used on all (see
//! [`TRIO_MECHANISMS`]), OAUTHBEARER and client certificates, each client going to the
//! leaders and the group coordinator on the listener it came in on.
//!
//! Needs `IGGY_SERVER_BIN` and the clients (`scripts/install-clients.sh`); prints
//! `SKIPPED:` without them (a missing client fails with `KAFKA_CLIENTS_REQUIRED=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use kafka_broker::cluster::leader;
use kafka_broker::store::cluster::{LiveView, Member};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::security::SecureSetup;
use support::trio::{DEFAULT_LEASE, Node, Trio};
use support::{Backend, Client, IggyServer, iggy_server_bin, require, run_against_all};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(150);
/// Nothing here stops a gateway: the default lease timings (see [`DEFAULT_LEASE`]).
const LEASE: &[(&str, &str)] = DEFAULT_LEASE;
/// kcat has no admin API: its topic is auto-created, with 3 partitions like the others.
const KCAT_GATEWAY_ENV: &[(&str, &str)] = &[
    LEASE[0],
    LEASE[1],
    ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "3"),
];

/// A topic prefix for `name` whose suite topic, `<prefix>-<suffix>`, has its three
/// partitions led by three different gateways, so the suite works with each of them (a
/// prefix drawn at random puts two or three partitions on one gateway 7 times in 9).
fn spread_prefix(name: &str, suffix: &str) -> String {
    let view = LiveView {
        members: (1..=3)
            .map(|node_id| Member {
                node_id,
                epoch: 1,
                listeners: Vec::new(),
            })
            .collect(),
        version: 1,
    };
    let base = support::topic_prefix(name);
    (0..1000)
        .map(|i| format!("{base}-{i}"))
        .find(|prefix| {
            let topic = format!("{prefix}-{suffix}");
            let mut leaders: Vec<Option<i32>> = (0..3).map(|p| leader(&view, &topic, p)).collect();
            leaders.sort_unstable();
            leaders == [Some(1), Some(2), Some(3)]
        })
        .expect("one prefix in 1000 spreads the partitions (each does with chance 2/9)")
}

fn run(name: &str, client: Client, script: &str, topic_suffix: &str) {
    let name = format!("{name} on three gateways");
    let prefix = spread_prefix(&name, topic_suffix);
    run_on_trio(&name, client, &format!("tests/clients/{script}"), &prefix);
}

/// Runs `script` with `client` against a fresh trio, topics under `prefix`.
fn run_on_trio(name: &str, client: Client, script: &str, prefix: &str) {
    if !require(name, client) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let gateway_env = match client {
        Client::Shell { .. } => KCAT_GATEWAY_ENV,
        _ => LEASE,
    };
    let started = Instant::now();
    let mut trio = Trio::start(IggyServer::start(&bin), gateway_env);
    let live = trio.wait_live();
    eprintln!(
        "{name}: Iggy and three gateways up in {:?} (all listed everywhere {live:?} after the last start)",
        started.elapsed()
    );
    run_against_all(
        &trio.refs(),
        name,
        client,
        script,
        &[],
        prefix,
        SCRIPT_TIMEOUT,
    );
}

/// One test per group scenario of `tests/clients/groups/` run against the trio.
macro_rules! group_scenarios {
    ($($test:ident: $name:expr, $client:expr, $script:expr;)*) => {
        $(
            #[test]
            fn $test() {
                let name = format!("{} group scenario {} on three gateways", $name, $script);
                run_on_trio(
                    &name,
                    $client,
                    &format!("tests/clients/groups/{}", $script),
                    &support::topic_prefix(&name),
                );
            }
        )*
    };
}

group_scenarios! {
    confluent_kafka_admin_groups: "confluent-kafka", CONFLUENT, "confluent_admin.py";
    kafka_python_admin_groups: "kafka-python", Client::Python { module: "kafka" }, "kafka_python_admin.py";
    kafkajs_admin_groups: "kafkajs", Client::Node, "kafkajs_admin.js";
    java_admin_groups: "java kafka-clients", Client::Java, "JavaAdmin.java";
    kafka_python_resume_groups: "kafka-python", Client::Python { module: "kafka" }, "kafka_python_resume.py";
    aiokafka_resume_groups: "aiokafka", Client::Python { module: "aiokafka" }, "aiokafka_resume.py";
    kafkajs_resume_groups: "kafkajs", Client::Node, "kafkajs_resume.js";
    java_resume_groups: "java kafka-clients", Client::Java, "JavaResume.java";
    java_cooperative_groups: "java kafka-clients", Client::Java, "JavaCooperative.java";
    java_static_groups: "java kafka-clients", Client::Java, "JavaStatic.java";
    confluent_kafka_cooperative_groups: "confluent-kafka", CONFLUENT, "confluent_cooperative.py";
    confluent_kafka_kill_groups: "confluent-kafka", CONFLUENT, "confluent_kill.py";
}

/// One test per client suite; the last field is the suffix of the suite's topic name.
macro_rules! suites {
    ($($test:ident: $name:expr, $client:expr, $script:expr, $suffix:expr;)*) => {
        $(
            #[test]
            fn $test() {
                run($name, $client, $script, $suffix);
            }
        )*
    };
}

const KCAT_2_0_2: Client = Client::Shell {
    needs_librdkafka216: false,
};
const KCAT_2_16: Client = Client::Shell {
    needs_librdkafka216: true,
};
const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};

suites! {
    confluent_kafka: "confluent-kafka", CONFLUENT, "confluent_kafka_suite.py", "confluent-kafka";
    kafka_python: "kafka-python", Client::Python { module: "kafka" }, "kafka_python_suite.py", "kafka-python";
    aiokafka: "aiokafka", Client::Python { module: "aiokafka" }, "aiokafka_suite.py", "aiokafka";
    kafkajs: "kafkajs", Client::Node, "kafkajs_suite.js", "kafkajs";
    java_kafka_clients: "java kafka-clients", Client::Java, "JavaSuite.java", "java";
    kcat_librdkafka_2_0_2: "kcat on librdkafka 2.0.2", KCAT_2_0_2, "kcat_librdkafka_2_0_2.sh", "kcat-rdkafka-2-0-2";
    kcat_librdkafka_2_16: "kcat on librdkafka 2.16", KCAT_2_16, "kcat_librdkafka_2_16.sh", "kcat-rdkafka-2-16";
}

/// The round trips of the security suite run against the trio: all of them. The SCRAM
/// credentials are created through whichever gateway the admin client reaches and used on
/// all three (they live in the meta stream, which every gateway re-reads; see
/// [`SCRAM_PROPAGATION_SECONDS`]).
const TRIO_MECHANISMS: &str = "plain,scram-sha-256,scram-sha-512,oauthbearer,ssl-client-cert";
/// How long the suite waits between creating the SCRAM credentials through one gateway
/// and using them on all: the others learn of them when they next re-read the meta
/// stream (every `IGGY_KAFKA_IGGY_META_REFRESH_INTERVAL_MS`, 1 s by default), three
/// intervals to allow for a loaded machine. Without the wait a client reaching a gateway
/// that has not re-read yet fails to authenticate, as with Kafka brokers that have not
/// yet heard of a change from the controller.
const SCRAM_PROPAGATION_SECONDS: &str = "3";

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn confluent_kafka_over_sasl_ssl() {
    let name = "confluent-kafka security suite on three gateways";
    if !require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let setup = SecureSetup::new();
    setup.create_iggy_users(&iggy.address);
    let mut ssl = Vec::new();
    let nodes: Vec<Node> = (0..3)
        .map(|_| {
            let [sasl_port, ssl_port, probe_port] = [(); 3].map(|()| test_support::free_port());
            let mut env = setup.gateway_env(Backend::Iggy, sasl_port, ssl_port);
            // The harness's own way in: PLAINTEXT on loopback, for Metadata probes.
            for (k, v) in &mut env {
                if *k == "IGGY_KAFKA_LISTENERS" {
                    v.push_str(&format!(",PLAINTEXT://127.0.0.1:{probe_port}"));
                }
            }
            ssl.push(loopback(ssl_port).to_string());
            Node {
                env,
                listed: loopback(sasl_port),
                accepts: vec![
                    loopback(sasl_port),
                    loopback(ssl_port),
                    loopback(probe_port),
                ],
                probe: loopback(probe_port),
            }
        })
        .collect();
    let mut trio = Trio::start_nodes(iggy, nodes, LEASE);
    trio.wait_live();
    let mut env = setup.script_env(Backend::Iggy, &ssl.join(","));
    env.push(("MECHANISMS", TRIO_MECHANISMS.into()));
    env.push(("SCRAM_PROPAGATION_SECONDS", SCRAM_PROPAGATION_SECONDS.into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_against_all(
        &trio.refs(),
        name,
        CONFLUENT,
        "tests/clients/security/confluent_kafka_security.py",
        &env,
        &support::topic_prefix(name),
        SCRIPT_TIMEOUT,
    );
}
