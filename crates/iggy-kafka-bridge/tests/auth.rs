//! Authentication with the bridge on a real Iggy server: SASL/PLAIN checked by logging
//! in to Iggy (with its cache), SCRAM credentials kept in the meta stream across restarts
//! and snapshots, and TLS to an Iggy server with its own CA.
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy::prelude::{Identifier, TopicClient, UserClient, UserStatus};
use iggy_kafka_bridge::{BridgeConfig, BridgeError, IggyBridge, IggyPlainAuthenticator};
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};
use kafka_sasl::{
    FailureKind, PlainAuthenticator, ScramCredential, ScramCredentialStore, ScramMechanism,
    ScramUserInfo,
};
use kafka_store::LogStore;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::Server;

/// An Iggy user the tests check passwords of.
const ALICE: &str = "kafka-alice";
const ALICE_PASSWORD: &str = "alice-secret-1";

/// A fresh Iggy server for test `name`; `None` (after the printed notice) without
/// `IGGY_SERVER_BIN`.
fn server_for(name: &str) -> Option<Server> {
    support::server_bin(name).map(|bin| Server::start(&bin))
}

async fn create_user(server: &Server, name: &str, password: &str) {
    let root = support::native_client(server).await;
    root.create_user(name, password, UserStatus::Active, None)
        .await
        .unwrap_or_else(|e| panic!("create user {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_checks_log_in_to_iggy_and_remember_successes() {
    let Some(server) = server_for("plain_checks_log_in_to_iggy_and_remember_successes") else {
        return;
    };
    create_user(&server, ALICE, ALICE_PASSWORD).await;
    let plain = IggyPlainAuthenticator::new(&support::config(&server)).unwrap();

    let identity = plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    assert_eq!(identity.name, ALICE);
    assert_eq!(identity.expires_at, None);
    assert_eq!(plain.iggy_logins(), 1);
    // Remembered: no second login.
    plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    assert_eq!(plain.iggy_logins(), 1);
    assert_eq!(plain.cache_hits(), 1);

    // A wrong password is not answered from the cache and is refused by Iggy; an
    // unknown user gets the same answer.
    let wrong = plain
        .authenticate(ALICE, "not-her-password")
        .await
        .unwrap_err();
    assert_eq!(wrong.kind, FailureKind::BadCredentials);
    assert!(!wrong.message.contains("not-her-password"));
    assert_eq!(plain.iggy_logins(), 2);
    let unknown = plain
        .authenticate("kafka-nobody", ALICE_PASSWORD)
        .await
        .unwrap_err();
    assert_eq!(unknown.kind, FailureKind::BadCredentials);
    assert_eq!(unknown.message, wrong.message);
    assert_eq!(plain.iggy_logins(), 3);
    // An inactive Iggy user is refused like a wrong password.
    let root = support::native_client(&server).await;
    root.create_user("kafka-idle", "idle-secret-1", UserStatus::Inactive, None)
        .await
        .unwrap();
    let inactive = plain
        .authenticate("kafka-idle", "idle-secret-1")
        .await
        .unwrap_err();
    assert_eq!(inactive.kind, FailureKind::BadCredentials);
    assert_eq!(inactive.message, wrong.message);
    assert_eq!(plain.iggy_logins(), 4);
    // Failures are not remembered; the success still is.
    plain
        .authenticate(ALICE, "not-her-password")
        .await
        .unwrap_err();
    assert_eq!(plain.iggy_logins(), 5);
    plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    assert_eq!(plain.iggy_logins(), 5);
    assert_eq!(plain.cached_users(), 1);

    let mut registry = prometheus_client::registry::Registry::default();
    plain.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        "kafka_gateway_iggy_plain_checks_total{outcome=\"cached\"} 2",
        "kafka_gateway_iggy_plain_checks_total{outcome=\"ok\"} 1",
        "kafka_gateway_iggy_plain_checks_total{outcome=\"bad_credentials\"} 4",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_plain_check_expires() {
    let Some(server) = server_for("a_remembered_plain_check_expires") else {
        return;
    };
    create_user(&server, ALICE, ALICE_PASSWORD).await;
    let config = BridgeConfig {
        plain_cache_ttl: Duration::from_millis(300),
        ..support::config(&server)
    };
    let plain = IggyPlainAuthenticator::new(&config).unwrap();
    plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    assert_eq!(plain.iggy_logins(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    assert_eq!(plain.iggy_logins(), 2, "an expired entry logs in again");

    // A cache of zero entries remembers nothing.
    let uncached = IggyPlainAuthenticator::new(&BridgeConfig {
        plain_cache_entries: 0,
        ..config
    })
    .unwrap();
    for _ in 0..2 {
        uncached.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    }
    assert_eq!(uncached.iggy_logins(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_checks_without_iggy_are_unavailable() {
    // No server needed: nothing listens on the port.
    let config = BridgeConfig {
        address: format!("127.0.0.1:{}", test_support::free_port()),
        call_timeout: Duration::from_secs(5),
        ..BridgeConfig::new("iggy", "bridge-password")
    };
    let plain = IggyPlainAuthenticator::new(&config).unwrap();
    let failure = plain
        .authenticate(ALICE, "a-password-never-logged")
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unavailable);
    assert!(!failure.message.contains("a-password-never-logged"));
    assert!(!format!("{failure:?}").contains("a-password-never-logged"));
    assert_eq!(plain.cached_users(), 0);
    assert_eq!(plain.iggy_logins(), 1);
    // What Iggy's login request cannot carry is refused without a connection.
    let long = "p".repeat(256);
    for (user, password) in [
        (ALICE, long.as_str()),
        (long.as_str(), "pw"),
        ("", "pw"),
        (ALICE, ""),
    ] {
        let failure = plain.authenticate(user, password).await.unwrap_err();
        assert_eq!(failure.kind, FailureKind::BadCredentials);
    }
    assert_eq!(plain.iggy_logins(), 1);
}

fn credential(mechanism: ScramMechanism, fill: u8, iterations: u32) -> ScramCredential {
    ScramCredential {
        mechanism,
        salt: vec![fill; 16],
        iterations,
        stored_key: vec![fill; mechanism.hash_len()],
        server_key: vec![fill ^ 0xff; mechanism.hash_len()],
    }
}

fn meta_config(server: &Server, meta_stream: &str) -> BridgeConfig {
    BridgeConfig {
        meta_stream: meta_stream.to_owned(),
        meta_snapshot_records: 100,
        ..support::config(server)
    }
}

async fn connect(server: &Server, config: BridgeConfig) -> IggyBridge {
    IggyBridge::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

/// A bridge on `server` with a meta stream of its own (snapshots every 100 records), and
/// that stream's name.
async fn scram_bridge(server: &Server) -> (String, IggyBridge) {
    let meta = format!("meta-{}", support::run_id());
    let bridge = connect(server, meta_config(server, &meta)).await;
    (meta, bridge)
}

/// Closes `bridge` and connects a new one to meta stream `meta`, as a restarted gateway.
async fn reconnect(server: &Server, meta: &str, bridge: IggyBridge) -> IggyBridge {
    bridge.close().await;
    drop(bridge);
    connect(server, meta_config(server, meta)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_survive_a_restart() {
    let Some(server) = server_for("scram_credentials_survive_a_restart") else {
        return;
    };
    let (meta, bridge) = scram_bridge(&server).await;
    let store = bridge.scram_store();
    let a256 = credential(ScramMechanism::Sha256, 1, 4096);
    let a512 = credential(ScramMechanism::Sha512, 2, 8192);
    let b256 = credential(ScramMechanism::Sha256, 3, 4096);
    assert_eq!(store.describe(None).await.unwrap(), vec![]);
    store.upsert("alice", a256.clone()).await.unwrap();
    store.upsert("alice", a512.clone()).await.unwrap();
    store.upsert("bob", b256.clone()).await.unwrap();
    // Replacing a credential: the last write wins.
    let b256_new = credential(ScramMechanism::Sha256, 4, 4096);
    store.upsert("bob", b256_new.clone()).await.unwrap();
    assert!(store.delete("alice", ScramMechanism::Sha512).await.unwrap());
    assert!(!store.delete("alice", ScramMechanism::Sha512).await.unwrap());
    assert!(!store.delete("carol", ScramMechanism::Sha256).await.unwrap());
    let described = store.describe(None).await.unwrap();
    drop(store);
    let bridge = reconnect(&server, &meta, bridge).await;
    let store = bridge.scram_store();
    assert_eq!(store.describe(None).await.unwrap(), described);
    assert_eq!(described.len(), 2);
    assert_eq!(described[0].user, "alice");
    assert_eq!(
        described[0].credentials,
        vec![(ScramMechanism::Sha256, 4096)]
    );
    assert_eq!(described[1].user, "bob");
    assert_eq!(
        store
            .credential("alice", ScramMechanism::Sha256)
            .await
            .unwrap(),
        Some(a256)
    );
    assert_eq!(
        store
            .credential("alice", ScramMechanism::Sha512)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .credential("bob", ScramMechanism::Sha256)
            .await
            .unwrap(),
        Some(b256_new)
    );
    let only_bob = store
        .describe(Some(&["bob".to_owned(), "carol".to_owned()]))
        .await
        .unwrap();
    assert_eq!(only_bob.len(), 1);
    assert_eq!(only_bob[0].user, "bob");
}

/// Every credential `described` lists, read from `store`.
async fn credentials_of(
    store: &dyn ScramCredentialStore,
    described: &[ScramUserInfo],
) -> Vec<Option<ScramCredential>> {
    let mut out = Vec::new();
    for info in described {
        for (mechanism, _) in &info.credentials {
            out.push(store.credential(&info.user, *mechanism).await.unwrap());
        }
    }
    out
}

/// The generations of the `scram` log in the meta stream.
async fn scram_generations(server: &Server, meta: &str) -> Vec<String> {
    let client = support::native_client(server).await;
    let mut names: Vec<String> = client
        .get_topics(&Identifier::named(meta).unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n == "scram" || n.starts_with("scram."))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_are_snapshotted_across_generations() {
    let Some(server) = server_for("scram_credentials_are_snapshotted_across_generations") else {
        return;
    };
    let (meta, bridge) = scram_bridge(&server).await;
    let store = bridge.scram_store();
    assert_eq!(scram_generations(&server, &meta).await, vec!["scram"]);
    // 250 writes over 20 users: the tail passes 100 twice, so two snapshots.
    for round in 0..250u32 {
        let user = format!("user-{}", round % 20);
        let fill = u8::try_from(round % 251).unwrap();
        let mechanism = if round % 3 == 0 {
            ScramMechanism::Sha512
        } else {
            ScramMechanism::Sha256
        };
        store
            .upsert(&user, credential(mechanism, fill, 4096 + round))
            .await
            .unwrap();
    }
    for user in 0..5 {
        store
            .delete(&format!("user-{user}"), ScramMechanism::Sha256)
            .await
            .unwrap();
    }
    let client = support::native_client(&server).await;
    let (settled, _) = support::settled_generation(&client, &meta, "scram").await;
    assert_ne!(settled, "scram", "no snapshot was taken");
    let generations = vec![settled];
    let described = store.describe(None).await.unwrap();
    let credentials = credentials_of(&*store, &described).await;
    drop(store);
    let bridge = reconnect(&server, &meta, bridge).await;
    let store = bridge.scram_store();
    assert_eq!(store.describe(None).await.unwrap(), described);
    let again = credentials_of(&*store, &described).await;
    assert_eq!(again, credentials);
    assert!(again.iter().all(Option::is_some));
    assert_eq!(scram_generations(&server, &meta).await, generations);
}

/// A CA, and a server certificate it issued for `localhost` and `127.0.0.1`, as PEM
/// files in `dir`: (ca file, cert file, key file).
fn issue_certs(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &issuer).unwrap();
    let files = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&files.0, ca_cert.pem()).unwrap();
    std::fs::write(&files.1, cert.pem()).unwrap();
    std::fs::write(&files.2, key.serialize_pem()).unwrap();
    files
}

fn tls_server(bin: &Path, dir: &Path) -> (Server, PathBuf) {
    let (ca, cert, key) = issue_certs(dir, "iggy");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let server = Server::start_with(
        bin,
        &[
            ("IGGY_TCP_TLS_ENABLED", "true"),
            ("IGGY_TCP_TLS_SELF_SIGNED", "false"),
            ("IGGY_TCP_TLS_CERT_FILE", &cert),
            ("IGGY_TCP_TLS_KEY_FILE", &key),
        ],
    );
    (server, ca)
}

fn tls_config(server: &Server, ca: &Path) -> BridgeConfig {
    BridgeConfig {
        tls_enabled: true,
        tls_ca_file: Some(ca.to_path_buf()),
        meta_stream: format!("meta-{}", support::run_id()),
        ..support::config(server)
    }
}

fn records_of(bytes: &Bytes) -> Vec<Bytes> {
    RecordBatch::decode(bytes, &DecodeLimits::default())
        .unwrap()
        .records()
        .unwrap()
        .map(|r| r.unwrap().value.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_speaks_tls_to_iggy() {
    let Some(bin) = support::server_bin("the_bridge_speaks_tls_to_iggy") else {
        return;
    };
    let dir = test_support::scratch_dir("iggy-tls");
    let (server, ca) = tls_server(&bin, &dir);
    let config = tls_config(&server, &ca);

    // Produce and fetch through the bridge, over TLS only.
    let bridge = connect(&server, config.clone()).await;
    let topic = format!("tls-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    let records: Vec<NewRecord> = ["one", "two", "three"]
        .iter()
        .map(|v| NewRecord {
            value: Some(Bytes::from_static(v.as_bytes())),
            ..NewRecord::default()
        })
        .collect();
    let mut batch = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut batch).unwrap();
    let batches = kafka_store::suite::valid(vec![batch.freeze()]).unwrap();
    let outcome = bridge.append(&topic, 0, batches, 0).await.unwrap();
    assert_eq!(outcome.base_offset, 0);
    let read = bridge.read(&topic, 0, 0, 1 << 20).await.unwrap();
    let values: Vec<Bytes> = read.batches.iter().flat_map(records_of).collect();
    assert_eq!(values, vec!["one", "two", "three"]);
    // The meta stream (committed offsets, SCRAM) goes over TLS too.
    bridge
        .scram_store()
        .upsert("alice", credential(ScramMechanism::Sha256, 7, 4096))
        .await
        .unwrap();

    // PLAIN checks open their own TLS connections.
    create_user_tls(&server, &config).await;
    let plain = IggyPlainAuthenticator::new(&config).unwrap();
    plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap();
    let wrong = plain
        .authenticate(ALICE, "wrong-password")
        .await
        .unwrap_err();
    assert_eq!(wrong.kind, FailureKind::BadCredentials);
    bridge.close().await;

    // Without TLS the server does not answer the bridge.
    let plaintext = BridgeConfig {
        connect_retries: 1,
        call_timeout: Duration::from_secs(3),
        ..support::config(&server)
    };
    assert!(IggyBridge::connect(plaintext).await.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Creates [`ALICE`] through a TLS connection as root (the test support's native client
/// speaks plain TCP).
async fn create_user_tls(server: &Server, config: &BridgeConfig) {
    use iggy::prelude::{AutoLogin, Client, Credentials, IggyClient};
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(server.address.clone())
        .with_tls_enabled(true)
        .with_tls_domain(config.tls_host())
        .with_tls_ca_file(config.tls_ca_file.as_ref().unwrap().display().to_string())
        .with_auto_sign_in(AutoLogin::Enabled(Credentials::UsernamePassword(
            support::USER.into(),
            secrecy::SecretString::from(support::PASSWORD.to_owned()),
        )))
        .build()
        .unwrap();
    client.connect().await.unwrap();
    client
        .create_user(ALICE, ALICE_PASSWORD, UserStatus::Active, None)
        .await
        .unwrap();
    let _ = client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_fails_at_connect_with_a_clear_error() {
    let Some(bin) = support::server_bin("a_wrong_ca_fails_at_connect_with_a_clear_error") else {
        return;
    };
    let dir = test_support::scratch_dir("iggy-tls-wrong-ca");
    let (server, _right_ca) = tls_server(&bin, &dir);
    let (other_ca, _, _) = issue_certs(&dir, "other");
    let config = BridgeConfig {
        connect_retries: 1,
        ..tls_config(&server, &other_ca)
    };
    let err = IggyBridge::connect(config.clone()).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BridgeError::Unreachable { .. }), "{err:?}");
    assert!(text.contains("TLS handshake with Iggy failed"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert!(text.contains(&other_ca.display().to_string()), "{text}");
    assert!(!text.contains(support::PASSWORD), "{text}");

    // A PLAIN check with the wrong CA is unavailable, not a bad password.
    let plain = IggyPlainAuthenticator::new(&config).unwrap();
    let failure = plain.authenticate(ALICE, ALICE_PASSWORD).await.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unavailable);

    // A CA file that is not there is refused before any connection.
    let missing = BridgeConfig {
        tls_ca_file: Some(dir.join("missing.pem")),
        ..config
    };
    match IggyBridge::connect(missing).await {
        Err(BridgeError::Config(m)) => assert!(m.contains("missing.pem"), "{m}"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_server_without_tls_fails_clearly() {
    let Some(bin) = support::server_bin("tls_to_a_server_without_tls_fails_clearly") else {
        return;
    };
    let dir = test_support::scratch_dir("iggy-no-tls");
    let server = Server::start(&bin);
    let (ca, _, _) = issue_certs(&dir, "unused");
    let config = BridgeConfig {
        connect_retries: 1,
        ..tls_config(&server, &ca)
    };
    let err = IggyBridge::connect(config).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BridgeError::Unreachable { .. }), "{err:?}");
    assert!(text.contains("TLS handshake with Iggy failed"), "{text}");
    assert!(text.contains("is TLS on"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
