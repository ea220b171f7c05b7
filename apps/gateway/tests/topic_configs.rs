//! Topic configuration with real clients: confluent-kafka (librdkafka) and the Java
//! AdminClient create topics with the settings their own admin tests and compacted-topic
//! users pass, read every setting back with DescribeConfigs (source, synonyms, and for Java
//! type and documentation), and change lists with IncrementalAlterConfigs APPEND/SUBTRACT.
//! The gateway runs with `IGGY_KAFKA_DEFAULT_RETENTION_MS` set, so `retention.ms` shows as
//! the broker's own setting (`STATIC_BROKER_CONFIG`). Each suite runs on the embedded store
//! and, with `IGGY_SERVER_BIN`, through the bridge. Clients that are not installed are
//! skipped (`support::require`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Backend, Client, Gateway, require, run_against, topic_prefix};

const RETENTION_MS: &str = "3600000";
const TIMEOUT: Duration = Duration::from_secs(120);

fn run(backend: Backend, name: &str, client: Client, script: &str) {
    if !require(name, client) {
        return;
    }
    let Some(gateway) = Gateway::start_on(
        backend,
        name,
        &[("IGGY_KAFKA_DEFAULT_RETENTION_MS", RETENTION_MS)],
    ) else {
        return;
    };
    run_against(
        &gateway,
        name,
        client,
        &format!("tests/clients/{script}"),
        &[("EXPECT_STATIC_RETENTION_MS", RETENTION_MS)],
        &topic_prefix(name),
        TIMEOUT,
    );
}

#[test]
fn confluent_kafka_topic_configs() {
    run(
        Backend::Memory,
        "topic-configs-confluent",
        Client::Python {
            module: "confluent_kafka",
        },
        "topic_configs_confluent.py",
    );
}

#[test]
fn confluent_kafka_topic_configs_on_iggy() {
    run(
        Backend::Iggy,
        "topic-configs-confluent-iggy",
        Client::Python {
            module: "confluent_kafka",
        },
        "topic_configs_confluent.py",
    );
}

#[test]
fn java_admin_topic_configs() {
    run(
        Backend::Memory,
        "topic-configs-java",
        Client::Java,
        "JavaTopicConfigs.java",
    );
}

#[test]
fn java_admin_topic_configs_on_iggy() {
    run(
        Backend::Iggy,
        "topic-configs-java-iggy",
        Client::Java,
        "JavaTopicConfigs.java",
    );
}
