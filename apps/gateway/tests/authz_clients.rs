//! Real Kafka clients against the gateway with authorization on.
//!
//! Each test writes a users file with the gateway's own `users set-password` (`admin`, a
//! super user through `IGGY_KAFKA_SUPER_USERS`; `alice` and `bob`, ordinary users; see
//! `support/security.rs`), starts the gateway with one `SASL_PLAINTEXT` listener on
//! loopback and the embedded store, and runs one script of `tests/clients/authz/` (timeout
//! 120 s) with the credentials in its environment.
//!
//! Allow-everyone-if-no-ACL-found is off (the gateway's default, set explicitly where a
//! suite depends on it) because the suites are about tenants: with it on, a topic no
//! binding covers would be open to every principal, and a tenant's isolation would depend
//! on every other tenant's names being covered by some binding.
//!
//! - `*_tenants`: the admin grants `User:alice` everything on PREFIXED `a.` topics and
//!   groups and `User:bob` the same on `b.`; alice's own work succeeds (a new `a.` topic
//!   included) and nothing of bob's is readable, writable, deletable, alterable, listed or
//!   described for her, nor its name revealed (Metadata, ListGroups, DescribeGroups,
//!   OffsetFetch, DescribeConfigs, ListOffsets, DescribeAcls).
//! - `*_acl_admin`: ACLs created, described with filters and deleted with filters through
//!   the client's admin API, each change in force for the very next request.
//! - `*_escalation_*`: an ordinary user tries to grant itself access, delete a DENY, set
//!   a SCRAM credential for the admin, throttle everyone and alter the broker's configs,
//!   with the defaults and with allow-everyone on: all refused with
//!   CLUSTER_AUTHORIZATION_FAILED (31).
//! - `*_host_acl_on_a_dual_stack_listener`: the listener binds `[::]`, the client comes in
//!   over IPv4 (`::ffff:127.0.0.1` on the socket); DENY bindings for host `127.0.0.1`
//!   refuse it, and one for another host does not.
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
    run_with(
        name,
        client,
        script,
        &[("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false")],
    );
}

/// [`run`] with `extra` settings in place of allow-everyone off, and, when `extra` binds
/// `[::]`, the clients sent to the listener's IPv4 loopback address.
fn run_with(name: &str, client: Client, script: &str, extra: &[(&str, &str)]) {
    if !require(name, client) {
        return;
    }
    // The users file (admin, alice, bob) and their per-run passwords; the certificates it
    // also makes are not used here.
    let setup = SecureSetup::new();
    let users_file = setup.users_file.display().to_string();
    let super_users = format!("User:{ADMIN_USER}");
    let mut settings = vec![
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
        ("IGGY_KAFKA_SASL_USERS_FILE", users_file.as_str()),
        ("IGGY_KAFKA_SUPER_USERS", super_users.as_str()),
        ("IGGY_KAFKA_AUTHORIZATION_ENABLED", "true"),
        // automatic creation stays off: a denied Metadata must not create anything
        ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "false"),
    ];
    settings.extend_from_slice(extra);
    let mut gateway = Gateway::start(&settings);
    if gateway.addr.ip().is_unspecified() {
        gateway.addr = std::net::SocketAddr::from(([127, 0, 0, 1], gateway.addr.port()));
    }
    let allow_everyone = extra
        .iter()
        .find(|(k, _)| *k == "IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND")
        .map_or("false", |(_, v)| *v);
    let env = [
        ("ALLOW_EVERYONE", allow_everyone),
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

/// A host-scoped DENY for `127.0.0.1` holds for an IPv4 client of a dual-stack `[::]`
/// listener, which the socket reports as `::ffff:127.0.0.1`.
#[test]
fn confluent_kafka_host_acl_on_a_dual_stack_listener() {
    run_with(
        "confluent-kafka",
        CONFLUENT,
        "confluent_kafka_host_acl.py",
        &[
            ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false"),
            ("IGGY_KAFKA_BIND_ADDR", "[::]:0"),
            ("IGGY_KAFKA_ADVERTISED_HOST", "127.0.0.1"),
        ],
    );
}

/// SCRAM offered beside PLAIN, for the escalation scripts to try a login with the
/// credential they tried to set.
const SCRAM_TOO: (&str, &str) = ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN,SCRAM-SHA-256");

/// An ordinary user's escalation attempts through confluent-kafka's AdminClient, with the
/// gateway's default settings: CreateAcls, DeleteAcls, AlterUserScramCredentials and broker
/// configs are refused, and a topic or group no binding names is closed.
#[test]
fn confluent_kafka_escalation_with_the_defaults() {
    run_with(
        "confluent-kafka",
        CONFLUENT,
        "confluent_kafka_escalation.py",
        &[SCRAM_TOO],
    );
}

/// The same with allow-everyone-if-no-ACL-found on: topics no binding names open up, the
/// cluster's management does not.
#[test]
fn confluent_kafka_escalation_with_allow_everyone() {
    run_with(
        "confluent-kafka",
        CONFLUENT,
        "confluent_kafka_escalation.py",
        &[
            SCRAM_TOO,
            ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true"),
        ],
    );
}

/// An ordinary user's escalation attempts through the Java AdminClient (ACLs, client
/// quotas, SCRAM credentials, broker configs), with the defaults.
#[test]
fn java_kafka_clients_escalation_with_the_defaults() {
    run_with(
        "java kafka-clients",
        Client::Java,
        "JavaEscalation.java",
        &[],
    );
}

/// The same with allow-everyone-if-no-ACL-found on.
#[test]
fn java_kafka_clients_escalation_with_allow_everyone() {
    run_with(
        "java kafka-clients",
        Client::Java,
        "JavaEscalation.java",
        &[("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true")],
    );
}
