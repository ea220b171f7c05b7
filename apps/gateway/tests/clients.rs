//! Real Kafka clients against the gateway binary.
//!
//! One test per client suite in `tests/clients/` (see the header of each script for what it
//! covers). Each test starts the gateway with `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`, reads the
//! bound address from its listen line, runs the suite with `BOOTSTRAP` and a unique
//! `TOPIC_PREFIX` (timeout 120 s) and stops the gateway again, also when the test fails.
//!
//! The clients are installed by `scripts/install-clients.sh` into `.clients/` (run by
//! `scripts/test.sh`). A client that is not installed is skipped with a `SKIPPED:` line,
//! unless `KAFKA_CLIENTS_REQUIRED=1`, which turns a missing client into a failure (see
//! `support/mod.rs`).
//!
//! `CLIENT_SUITE_KEEP_GOING=1` (passed through to the suites) makes a suite report every
//! mismatch instead of stopping at the first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Client, run_script};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// kcat has no admin API: its topic is auto-created, with 3 partitions like the others.
const KCAT_GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "3")];

fn run(name: &str, client: Client, script: &str) {
    let gateway_env = match client {
        Client::Shell { .. } => KCAT_GATEWAY_ENV,
        _ => &[],
    };
    run_script(
        name,
        client,
        &format!("tests/clients/{script}"),
        gateway_env,
        SCRIPT_TIMEOUT,
    );
}

#[test]
fn confluent_kafka() {
    run(
        "confluent-kafka",
        Client::Python {
            module: "confluent_kafka",
        },
        "confluent_kafka_suite.py",
    );
}

#[test]
fn kafka_python() {
    run(
        "kafka-python",
        Client::Python { module: "kafka" },
        "kafka_python_suite.py",
    );
}

#[test]
fn aiokafka() {
    run(
        "aiokafka",
        Client::Python { module: "aiokafka" },
        "aiokafka_suite.py",
    );
}

#[test]
fn kafkajs() {
    run("kafkajs", Client::Node, "kafkajs_suite.js");
}

#[test]
fn java_kafka_clients() {
    run("java kafka-clients", Client::Java, "JavaSuite.java");
}

#[test]
fn kcat_librdkafka_2_0_2() {
    run(
        "kcat on librdkafka 2.0.2",
        Client::Shell {
            needs_librdkafka216: false,
        },
        "kcat_librdkafka_2_0_2.sh",
    );
}

#[test]
fn kcat_librdkafka_2_16() {
    run(
        "kcat on librdkafka 2.16",
        Client::Shell {
            needs_librdkafka216: true,
        },
        "kcat_librdkafka_2_16.sh",
    );
}

#[test]
fn listen_line_parsing() {
    use std::net::SocketAddr;
    use support::parse_listen_line;
    let ok = |s: &str| parse_listen_line(s).and_then(Result::ok);
    assert_eq!(
        ok("listening on 127.0.0.1:40123 advertised 127.0.0.1:40123\n"),
        Some(SocketAddr::from(([127, 0, 0, 1], 40123)))
    );
    assert_eq!(
        ok("listening on [::1]:9 advertised [::1]:9\nmore"),
        Some("[::1]:9".parse().unwrap())
    );
    assert!(
        parse_listen_line("listening on 127.0.0.1:40123 adv").is_none(),
        "incomplete line"
    );
    assert!(matches!(parse_listen_line("hello\n"), Some(Err(_))));
    assert!(matches!(
        parse_listen_line("listening on 127.0.0.1:0 advertised h:1\n"),
        Some(Err(_))
    ));
}
