//! Real Kafka clients against the gateway binary.
//!
//! One test per client suite in `tests/clients/` (see the header of each script for what it
//! covers). Each test starts the gateway with `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`, reads the
//! bound address from its listen line, runs the suite with `BOOTSTRAP` and a unique
//! `TOPIC_PREFIX` (timeout 120 s) and stops the gateway again, also when the test fails.
//! Every suite runs twice: on the embedded store, and on a real Apache Iggy server through
//! the bridge (`<client>_on_iggy`, skipped unless `IGGY_SERVER_BIN` names an `iggy-server`
//! binary).
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
use support::{Backend, Client, run_script_on};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// kcat has no admin API: its topic is auto-created, with 3 partitions like the others.
const KCAT_GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "3")];

fn run(backend: Backend, name: &str, client: Client, script: &str) {
    let gateway_env = match client {
        Client::Shell { .. } => KCAT_GATEWAY_ENV,
        _ => &[],
    };
    run_script_on(
        backend,
        name,
        client,
        &format!("tests/clients/{script}"),
        gateway_env,
        SCRIPT_TIMEOUT,
    );
}

/// One test per suite and backend.
macro_rules! suites {
    ($($memory:ident, $iggy:ident: $name:expr, $client:expr, $script:expr;)*) => {
        $(
            #[test]
            fn $memory() {
                run(Backend::Memory, $name, $client, $script);
            }

            #[test]
            fn $iggy() {
                run(Backend::Iggy, $name, $client, $script);
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

suites! {
    confluent_kafka, confluent_kafka_on_iggy: "confluent-kafka", Client::Python { module: "confluent_kafka" }, "confluent_kafka_suite.py";
    kafka_python, kafka_python_on_iggy: "kafka-python", Client::Python { module: "kafka" }, "kafka_python_suite.py";
    aiokafka, aiokafka_on_iggy: "aiokafka", Client::Python { module: "aiokafka" }, "aiokafka_suite.py";
    kafkajs, kafkajs_on_iggy: "kafkajs", Client::Node, "kafkajs_suite.js";
    java_kafka_clients, java_kafka_clients_on_iggy: "java kafka-clients", Client::Java, "JavaSuite.java";
    kcat_librdkafka_2_0_2, kcat_librdkafka_2_0_2_on_iggy: "kcat on librdkafka 2.0.2", KCAT_2_0_2, "kcat_librdkafka_2_0_2.sh";
    kcat_librdkafka_2_16, kcat_librdkafka_2_16_on_iggy: "kcat on librdkafka 2.16", KCAT_2_16, "kcat_librdkafka_2_16.sh";
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
