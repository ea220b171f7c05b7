//! Consumer groups with real Kafka clients against the gateway binary.
//!
//! One test per script in `tests/clients/groups/` (the header of each script says what it
//! checks). Each test starts its own gateway with `IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0`
//! and a log level of `info,kafka_broker=debug`, runs the script with `BOOTSTRAP` and a
//! unique `TOPIC_PREFIX` (timeout 90 s), and prints the script's output and the end of the
//! gateway log when it fails. Clients come from `scripts/install-clients.sh`; a missing one
//! is skipped unless `KAFKA_CLIENTS_REQUIRED=1` (see `support/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Client, run_script};

const TIMEOUT: Duration = Duration::from_secs(90);
const GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")];

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const KAFKA_PYTHON: Client = Client::Python { module: "kafka" };
const AIOKAFKA: Client = Client::Python { module: "aiokafka" };

fn run(name: &str, client: Client, script: &str) {
    run_script(
        name,
        client,
        &format!("tests/clients/groups/{script}"),
        GATEWAY_ENV,
        TIMEOUT,
    );
}

#[test]
fn confluent_kafka_split_leave_resume() {
    run("confluent-kafka", CONFLUENT, "confluent_split_leave.py");
}

#[test]
fn confluent_kafka_killed_member() {
    run("confluent-kafka", CONFLUENT, "confluent_kill.py");
}

#[test]
fn confluent_kafka_cooperative_sticky() {
    run("confluent-kafka", CONFLUENT, "confluent_cooperative.py");
}

#[test]
fn confluent_kafka_admin() {
    run("confluent-kafka", CONFLUENT, "confluent_admin.py");
}

#[test]
fn kafka_python_resume() {
    run("kafka-python", KAFKA_PYTHON, "kafka_python_resume.py");
}

#[test]
fn kafka_python_admin() {
    run("kafka-python", KAFKA_PYTHON, "kafka_python_admin.py");
}

#[test]
fn aiokafka_resume() {
    run("aiokafka", AIOKAFKA, "aiokafka_resume.py");
}

#[test]
fn kafkajs_resume() {
    run("kafkajs", Client::Node, "kafkajs_resume.js");
}

#[test]
fn kafkajs_admin() {
    run("kafkajs", Client::Node, "kafkajs_admin.js");
}

#[test]
fn java_resume() {
    run("java kafka-clients", Client::Java, "JavaResume.java");
}

#[test]
fn java_cooperative_sticky() {
    run("java kafka-clients", Client::Java, "JavaCooperative.java");
}

#[test]
fn java_static_membership() {
    run("java kafka-clients", Client::Java, "JavaStatic.java");
}

#[test]
fn java_admin() {
    run("java kafka-clients", Client::Java, "JavaAdmin.java");
}
