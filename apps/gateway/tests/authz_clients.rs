//! Real Kafka clients against the gateway with authorization on.
//!
//! Each test writes a users file with the gateway's own `users set-password` (`admin`, a
//! super user through `IGGY_KAFKA_SUPER_USERS`; `alice` and `bob`, ordinary users; see
//! `support/security.rs`), starts the gateway with one `SASL_PLAINTEXT` listener on
//! loopback, the embedded store and `IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=false`,
//! and runs one script of `tests/clients/authz/` (timeout 120 s) with the credentials in
//! its environment.
//!
//! Allow-everyone is off because the suites are about tenants: with it on (the gateway's
//! default, so that Iggy permissions alone decide where no ACL names a resource), a topic
//! no binding covers would be open to every principal, and a tenant's isolation would
//! depend on every other tenant's names being covered by some binding.
//!
//! - `*_tenants`: the admin grants `User:alice` everything on PREFIXED `a.` topics and
//!   groups and `User:bob` the same on `b.`; alice's own work succeeds (a new `a.` topic
//!   included) and nothing of bob's is readable, writable, deletable, alterable, listed or
//!   described for her, nor its name revealed (Metadata, ListGroups, DescribeGroups,
//!   OffsetFetch, DescribeConfigs, ListOffsets, DescribeAcls).
//! - `*_acl_admin`: ACLs created, described with filters and deleted with filters through
//!   the client's admin API, each change in force for the very next request.
//!
//! A client that is not installed is skipped with a `SKIPPED:` line, unless
//! `KAFKA_CLIENTS_REQUIRED=1` (see `support/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::security::{ADMIN_USER, PLAIN_USER, SCRAM_USER, SecureSetup};
use support::{Client, Gateway, require, run_against, topic_prefix};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts a gateway with a SASL_PLAINTEXT listener and authorization on (ACLs alone
/// decide, nothing allowed without a binding) and runs `script` of `tests/clients/authz/`.
fn run(name: &str, client: Client, script: &str) {
    if !require(name, client) {
        return;
    }
    // The users file (admin, alice, bob) and their per-run passwords; the certificates it
    // also makes are not used here.
    let setup = SecureSetup::new();
    let users_file = setup.users_file.display().to_string();
    let super_users = format!("User:{ADMIN_USER}");
    let gateway = Gateway::start(&[
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
        ("IGGY_KAFKA_SASL_USERS_FILE", users_file.as_str()),
        ("IGGY_KAFKA_SUPER_USERS", super_users.as_str()),
        ("IGGY_KAFKA_AUTHORIZATION_ENABLED", "true"),
        ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false"),
        // automatic creation stays off: a denied Metadata must not create anything
        ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "false"),
    ]);
    let env = [
        ("ADMIN_USER", ADMIN_USER),
        ("ADMIN_PASSWORD", setup.admin_password.as_str()),
        ("ALICE_USER", PLAIN_USER),
        ("ALICE_PASSWORD", setup.plain_password.as_str()),
        ("BOB_USER", SCRAM_USER),
        ("BOB_PASSWORD", setup.scram_password.as_str()),
    ];
    run_against(
        &gateway,
        name,
        client,
        &format!("tests/clients/authz/{script}"),
        &env,
        &topic_prefix(name),
        SCRIPT_TIMEOUT,
    );
}

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const KAFKA_PYTHON: Client = Client::Python { module: "kafka" };

#[test]
fn confluent_kafka_tenants() {
    run("confluent-kafka", CONFLUENT, "confluent_kafka_tenants.py");
}

#[test]
fn kafka_python_tenants() {
    run("kafka-python", KAFKA_PYTHON, "kafka_python_tenants.py");
}

#[test]
fn confluent_kafka_acl_admin() {
    run("confluent-kafka", CONFLUENT, "confluent_kafka_acls.py");
}

#[test]
fn java_kafka_clients_acl_admin() {
    run("java kafka-clients", Client::Java, "JavaAcls.java");
}
