//! Real Kafka clients against the gateway over TLS and SASL.
//!
//! One test per client suite in `tests/clients/security/` (each script's header says what
//! it covers). Each test makes a CA, certificates, a users file, a JWKS and a signed token
//! (see `support/security.rs`), starts a gateway with a `SASL_SSL` and an `SSL` listener
//! (client certificates required there), runs the suite with the addresses, files and
//! credentials in its environment (timeout 90 s) and stops the gateway again.
//!
//! - confluent-kafka: PLAIN, SCRAM-SHA-256/512 (credentials made with
//!   AlterUserScramCredentials), OAUTHBEARER (token callback), SSL client certificate.
//! - Java kafka-clients 3.9.1: the same, OAUTHBEARER through a loopback token endpoint.
//! - kafka-python: PLAIN, SCRAM-SHA-256/512 (its own AlterUserScramCredentials).
//! - aiokafka, kafkajs, kcat on librdkafka 2.16 and 2.0.2: PLAIN, SCRAM-SHA-256/512 (no
//!   admin call for SCRAM there: the credentials come from `users set-scram`).
//! - `<client>_plain_on_iggy` (confluent-kafka, Java): the same suite on a bridged gateway,
//!   where PLAIN is checked by logging into Iggy as an Iggy user (`alice`, made with the
//!   Iggy SDK; Iggy's root user is the super user) and SCRAM credentials are kept in Iggy;
//!   skipped unless `IGGY_SERVER_BIN` names an `iggy-server` binary.
//!
//! Every suite also checks that a wrong password ends in an authentication error.
//! A client that is not installed is skipped with a `SKIPPED:` line, unless
//! `KAFKA_CLIENTS_REQUIRED=1` (see `support/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::time::Duration;
use support::security::SecureSetup;
use support::{Backend, Client, require, run_against, topic_prefix};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

/// What a suite needs from the harness besides the gateway.
#[derive(Clone, Copy)]
struct Needs {
    /// SCRAM credentials made before the gateway starts (no admin API in the client).
    seeded_scram: bool,
    /// A loopback OAuth token endpoint (the Java client).
    token_endpoint: bool,
}

const ADMIN_API: Needs = Needs {
    seeded_scram: false,
    token_endpoint: false,
};
const NO_ADMIN_API: Needs = Needs {
    seeded_scram: true,
    token_endpoint: false,
};
const JAVA: Needs = Needs {
    seeded_scram: false,
    token_endpoint: true,
};

fn run(backend: Backend, name: &str, client: Client, script: &str, needs: Needs) {
    if !require(name, client) || (needs.token_endpoint && !jackson_installed(name)) {
        return;
    }
    let setup = SecureSetup::new();
    if needs.seeded_scram {
        setup.seed_scram();
    }
    let Some(mut secure) = setup.start_on(backend, name) else {
        return;
    };
    if needs.token_endpoint {
        secure = secure.with_token_endpoint();
    }
    let env = secure.script_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_against(
        &secure.gateway,
        name,
        client,
        &format!("tests/clients/security/{script}"),
        &env,
        &topic_prefix(name),
        SCRIPT_TIMEOUT,
    );
    if let Some(endpoint) = &secure.token_endpoint
        && backend == Backend::Memory
    {
        assert!(
            endpoint.served() > 0,
            "{name}: the suite passed but never fetched a token from the token endpoint"
        );
    }
}

/// The Java client's OAUTHBEARER login needs Jackson next to kafka-clients (linked by
/// `scripts/install-clients.sh`); without it the test is skipped like a missing client.
fn jackson_installed(name: &str) -> bool {
    let jar = support::repo_root().join(".clients/java/jars/jackson-databind.jar");
    if jar.exists() {
        return true;
    }
    assert!(
        !support::clients_required(),
        "{name}: {} missing (run scripts/install-clients.sh) and KAFKA_CLIENTS_REQUIRED=1",
        jar.display()
    );
    // straight to the process's stderr: visible even when the harness captures output
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {name}: {} missing (run scripts/install-clients.sh)",
        jar.display()
    );
    false
}

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const KCAT_2_0_2: Client = Client::Shell {
    needs_librdkafka216: false,
};
const KCAT_2_16: Client = Client::Shell {
    needs_librdkafka216: true,
};

#[test]
fn confluent_kafka() {
    let script = "confluent_kafka_security.py";
    run(
        Backend::Memory,
        "confluent-kafka",
        CONFLUENT,
        script,
        ADMIN_API,
    );
}

#[test]
fn confluent_kafka_plain_on_iggy() {
    let script = "confluent_kafka_security.py";
    run(
        Backend::Iggy,
        "confluent-kafka",
        CONFLUENT,
        script,
        ADMIN_API,
    );
}

#[test]
fn java_kafka_clients() {
    let script = "JavaSecurity.java";
    run(
        Backend::Memory,
        "java kafka-clients",
        Client::Java,
        script,
        JAVA,
    );
}

#[test]
fn java_kafka_clients_plain_on_iggy() {
    let script = "JavaSecurity.java";
    run(
        Backend::Iggy,
        "java kafka-clients",
        Client::Java,
        script,
        JAVA,
    );
}

#[test]
fn kafka_python() {
    let client = Client::Python { module: "kafka" };
    let script = "kafka_python_security.py";
    run(Backend::Memory, "kafka-python", client, script, ADMIN_API);
}

#[test]
fn aiokafka() {
    let client = Client::Python { module: "aiokafka" };
    let script = "aiokafka_security.py";
    run(Backend::Memory, "aiokafka", client, script, NO_ADMIN_API);
}

#[test]
fn kafkajs() {
    let script = "kafkajs_security.js";
    run(
        Backend::Memory,
        "kafkajs",
        Client::Node,
        script,
        NO_ADMIN_API,
    );
}

#[test]
fn kcat_librdkafka_2_16() {
    let script = "kcat_security_librdkafka_2_16.sh";
    run(
        Backend::Memory,
        "kcat on librdkafka 2.16",
        KCAT_2_16,
        script,
        NO_ADMIN_API,
    );
}

#[test]
fn kcat_librdkafka_2_0_2() {
    let script = "kcat_security_librdkafka_2_0_2.sh";
    run(
        Backend::Memory,
        "kcat on librdkafka 2.0.2",
        KCAT_2_0_2,
        script,
        NO_ADMIN_API,
    );
}

/// The harness's tokens verify with the JWKS it writes (so an OAUTHBEARER failure in a
/// suite is the gateway's, not a broken token).
#[test]
fn minted_tokens_verify_against_the_jwks() {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let jwt = support::security::Jwt::new();
    let token = jwt.mint("carol", Duration::from_secs(60));
    let jwks: serde_json::Value = serde_json::from_str(&jwt.jwks()).unwrap();
    let key = &jwks["keys"][0];
    let coord = |c: &str| URL_SAFE_NO_PAD.decode(key[c].as_str().unwrap()).unwrap();
    let mut point = vec![4u8];
    point.extend(coord("x"));
    point.extend(coord("y"));
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let signed = format!("{}.{}", parts[0], parts[1]);
    let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    let public =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point);
    public.verify(signed.as_bytes(), &sig).unwrap();
    let mut tampered = sig.clone();
    tampered[0] ^= 1;
    assert!(public.verify(signed.as_bytes(), &tampered).is_err());
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims["sub"], "carol");
    assert_eq!(claims["iss"], support::security::OAUTH_ISSUER);
    assert_eq!(claims["aud"], support::security::OAUTH_AUDIENCE);
    assert!(claims["exp"].as_u64().unwrap() > claims["iat"].as_u64().unwrap());
}

/// The token endpoint answers a client-credentials POST with a token and refuses others.
#[test]
fn token_endpoint_answers_client_credentials() {
    use std::io::{Read, Write};
    let endpoint =
        support::security::TokenEndpoint::start(std::sync::Arc::new(support::security::Jwt::new()));
    let addr = endpoint
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let ask = |body: &str| {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "POST /oauth2/token HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        conn.read_to_string(&mut out).unwrap();
        out
    };
    let ok = ask("grant_type=client_credentials&scope=kafka");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let json: serde_json::Value =
        serde_json::from_str(ok.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(json["token_type"], "bearer");
    assert_eq!(json["access_token"].as_str().unwrap().split('.').count(), 3);
    let bad = ask("grant_type=password");
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    assert_eq!(endpoint.served(), 1);
}
