//! Consumer groups with real Kafka clients against the gateway binary.
//!
//! One test per script in `tests/clients/groups/` (the header of each script says what it
//! checks). Each test starts its own gateway with `IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0`
//! and a log level of `info,kafka_broker=debug`, runs the script with `BOOTSTRAP` and a
//! unique `TOPIC_PREFIX` (timeout 90 s), and prints the script's output and the end of the
//! gateway log when it fails. Every scenario runs twice: on the embedded store, and on a
//! real Apache Iggy server through the bridge (`<name>_on_iggy`, skipped unless
//! `IGGY_SERVER_BIN` names an `iggy-server` binary). Clients come from `scripts/install-clients.sh`; a missing one
//! is skipped unless `KAFKA_CLIENTS_REQUIRED=1` (see `support/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Backend, Client, run_script_on};

const TIMEOUT: Duration = Duration::from_secs(90);
const GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")];

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const KAFKA_PYTHON: Client = Client::Python { module: "kafka" };
const AIOKAFKA: Client = Client::Python { module: "aiokafka" };

fn run(backend: Backend, name: &str, client: Client, script: &str) {
    run_script_on(
        backend,
        name,
        client,
        &format!("tests/clients/groups/{script}"),
        GATEWAY_ENV,
        TIMEOUT,
    );
}

/// One test per scenario and backend.
macro_rules! scenarios {
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

scenarios! {
    confluent_kafka_split_leave_resume, confluent_kafka_split_leave_resume_on_iggy: "confluent-kafka", CONFLUENT, "confluent_split_leave.py";
    confluent_kafka_killed_member, confluent_kafka_killed_member_on_iggy: "confluent-kafka", CONFLUENT, "confluent_kill.py";
    confluent_kafka_cooperative_sticky, confluent_kafka_cooperative_sticky_on_iggy: "confluent-kafka", CONFLUENT, "confluent_cooperative.py";
    confluent_kafka_admin, confluent_kafka_admin_on_iggy: "confluent-kafka", CONFLUENT, "confluent_admin.py";
    kafka_python_resume, kafka_python_resume_on_iggy: "kafka-python", KAFKA_PYTHON, "kafka_python_resume.py";
    kafka_python_admin, kafka_python_admin_on_iggy: "kafka-python", KAFKA_PYTHON, "kafka_python_admin.py";
    aiokafka_resume, aiokafka_resume_on_iggy: "aiokafka", AIOKAFKA, "aiokafka_resume.py";
    kafkajs_resume, kafkajs_resume_on_iggy: "kafkajs", Client::Node, "kafkajs_resume.js";
    kafkajs_admin, kafkajs_admin_on_iggy: "kafkajs", Client::Node, "kafkajs_admin.js";
    java_resume, java_resume_on_iggy: "java kafka-clients", Client::Java, "JavaResume.java";
    java_cooperative_sticky, java_cooperative_sticky_on_iggy: "java kafka-clients", Client::Java, "JavaCooperative.java";
    java_static_membership, java_static_membership_on_iggy: "java kafka-clients", Client::Java, "JavaStatic.java";
    java_admin, java_admin_on_iggy: "java kafka-clients", Client::Java, "JavaAdmin.java";
}
