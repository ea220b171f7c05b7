//! SASL over real TCP: an in-process [`kafka_broker::Server`] on a SASL_PLAINTEXT
//! listener with users kept in memory, driven by test-support's SASL client. The
//! mechanisms (PLAIN, SCRAM-SHA-256/512), both token flows (SaslAuthenticate and the raw
//! v0 frames), KIP-368 session lifetimes, the hostile cases (wrong passwords with a growing
//! delay, unknown mechanisms, forged and replayed SCRAM messages, oversized tokens and
//! frames, requests before authentication, idle unauthenticated connections, a crowd of
//! concurrent authentications) and the SCRAM credential APIs (50, 51).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use kafka_broker::config::SaslSettings;
use kafka_broker::metrics::Metrics;
use kafka_broker::session::{Listener, SecurityProtocol};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::{BrokerConfig, Server, Stores};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResponse;
use kafka_protocol::messages::describe_user_scram_credentials_request::{
    DescribeUserScramCredentialsRequest, UserName,
};
use kafka_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResponse;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use kafka_sasl::{
    AuthFailure, Authenticator, FailureKind, Identity, Jwks, Mechanism, OAuthConfig,
    OAuthValidator, PlainAuthenticator, SaslConfig, ScramCredential, ScramCredentialStore,
    ScramMechanism, UsersFile,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use test_support::sasl_client::{
    AuthOutcome, Flow, SaslClient, ScramClient, ScramHash, scram_salted_password,
};
use tokio::net::{TcpListener, TcpStream};

const V2: Flow = Flow::Authenticate(2);

/// Users of every gateway here: PLAIN passwords and SCRAM credentials of both hashes.
const USERS: &[(&str, &str)] = &[
    ("alice", "alice-secret"),
    ("bob", "bob-secret"),
    ("admin", "admin-secret"),
];

struct Gateway {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
}

/// Settings with a short failure delay, so tests that fail on purpose stay quick.
fn settings() -> SaslSettings {
    SaslSettings {
        failure_delay: Duration::from_millis(10),
        failure_delay_max: Duration::from_millis(50),
        super_users: vec!["User:admin".into()],
        ..SaslSettings::default()
    }
}

async fn start(settings: SaslSettings) -> Gateway {
    start_with(settings, SaslConfig::default()).await
}

async fn start_with(settings: SaslSettings, sasl: SaslConfig) -> Gateway {
    start_full(settings, sasl, None).await
}

async fn start_full(
    settings: SaslSettings,
    sasl: SaslConfig,
    oauth: Option<Arc<OAuthValidator>>,
) -> Gateway {
    // Fewer PBKDF2 rounds than production PLAIN hashes: debug builds are slow at them.
    let users = Arc::new(UsersFile::in_memory().with_plain_iterations(4096));
    for (user, password) in USERS {
        users.set_password(user, password).unwrap();
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let c = ScramCredential::from_password(m, password, 4096).unwrap();
            users.upsert(user, c).await.unwrap();
        }
    }
    let authenticator = Authenticator::new(sasl, Some(users.clone()), Some(users), oauth);
    let config = BrokerConfig {
        sasl: settings,
        ..BrokerConfig::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    let server = Server::new(config, stores())
        .listener(Listener::new("SASL", SecurityProtocol::SaslPlaintext))
        .authenticator(Arc::new(authenticator))
        .metrics(metrics.clone());
    tokio::spawn(server.serve(listener, std::future::pending()));
    Gateway { addr, metrics }
}

/// An embedded store, empty.
fn stores() -> Stores {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    Stores {
        log: store.clone(),
        offsets: store,
    }
}

async fn client(g: &Gateway) -> SaslClient<TcpStream> {
    let socket = TcpStream::connect(g.addr).await.unwrap();
    SaslClient::new(socket).with_timeout(Duration::from_secs(10))
}

fn metadata() -> RequestBody {
    MetadataRequest {
        topics: Some(Vec::new()),
        ..Default::default()
    }
    .into()
}

/// Whether the connection still serves requests (a Metadata request is answered).
async fn serves(c: &mut SaslClient<TcpStream>) -> bool {
    matches!(
        c.request(12, metadata()).await,
        Ok(Some(ResponseBody::Metadata(_)))
    )
}

async fn authenticated_as(g: &Gateway, user: &str, password: &str) -> SaslClient<TcpStream> {
    let mut c = client(g).await;
    let outcome = c.plain(V2, user, password).await.unwrap();
    assert!(outcome.is_authenticated(), "{user}: {outcome:?}");
    c
}

fn assert_failed(outcome: &AuthOutcome) {
    assert!(
        matches!(
            outcome,
            AuthOutcome::Rejected { error_code, .. } if *error_code == ErrorCode::SASL_AUTHENTICATION_FAILED.code()
        ),
        "expected SASL_AUTHENTICATION_FAILED, got {outcome:?}"
    );
}

#[tokio::test]
async fn plain_accepts_the_right_password_and_refuses_a_wrong_one() {
    let g = start(settings()).await;
    let mut c = client(&g).await;
    assert!(c.api_versions().await.unwrap().is_some());
    let outcome = c.plain(V2, "alice", "alice-secret").await.unwrap();
    assert_eq!(
        outcome,
        AuthOutcome::Authenticated {
            session_lifetime_ms: 0
        }
    );
    assert!(serves(&mut c).await);

    let mut c = client(&g).await;
    let outcome = c.plain(V2, "alice", "wrong").await.unwrap();
    assert_failed(&outcome);
    let AuthOutcome::Rejected { message, .. } = outcome else {
        unreachable!()
    };
    assert!(!message.unwrap_or_default().contains("wrong"));
    assert!(c.closed_by_peer().await, "a failed authentication closes");

    // An unknown user fails the same way.
    let mut c = client(&g).await;
    assert_failed(&c.plain(V2, "nobody", "x").await.unwrap());

    let text = g.metrics.encode().unwrap();
    assert!(
        text.contains(
            r#"kafka_gateway_sasl_authentications_total{listener="SASL",mechanism="PLAIN",outcome="success"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"kafka_gateway_sasl_authentications_total{listener="SASL",mechanism="PLAIN",outcome="failure"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"kafka_gateway_sasl_authentication_failures_total{kind="bad_credentials"} 2"#
        )
    );
}

#[tokio::test]
async fn scram_sha_256_and_512_authenticate_and_the_server_proves_itself() {
    let g = start(settings()).await;
    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        for version in [0, 1, 2] {
            let mut c = client(&g).await;
            let outcome = c
                .scram(Flow::Authenticate(version), hash, "bob", "bob-secret")
                .await
                .unwrap();
            assert!(
                outcome.is_authenticated(),
                "{hash:?} v{version}: {outcome:?}"
            );
            assert!(serves(&mut c).await);
        }
        let mut c = client(&g).await;
        assert_failed(&c.scram(V2, hash, "bob", "not-bob").await.unwrap());
        assert!(c.closed_by_peer().await);
    }
}

#[tokio::test]
async fn the_v0_raw_token_flow_authenticates_old_clients() {
    let g = start(settings()).await;
    let mut c = client(&g).await;
    let outcome = c.plain(Flow::Raw, "alice", "alice-secret").await.unwrap();
    assert!(outcome.is_authenticated(), "{outcome:?}");
    assert!(
        serves(&mut c).await,
        "back to Kafka requests after the raw tokens"
    );

    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let mut c = client(&g).await;
        let outcome = c.scram(Flow::Raw, hash, "bob", "bob-secret").await.unwrap();
        assert!(outcome.is_authenticated(), "{hash:?}: {outcome:?}");
        assert!(serves(&mut c).await);
    }

    // A failed raw exchange just closes.
    let mut c = client(&g).await;
    let outcome = c.plain(Flow::Raw, "alice", "wrong").await.unwrap();
    assert_eq!(outcome, AuthOutcome::Closed);

    // SaslAuthenticate after a v0 handshake is out of order.
    let mut c = client(&g).await;
    assert!(c.start(Flow::Raw, "PLAIN").await.unwrap().is_none());
    let _ = c.authenticate(2, b"\0alice\0alice-secret").await;
    assert!(c.closed_by_peer().await);
}

#[tokio::test]
async fn a_session_lifetime_is_reported_and_re_authentication_extends_it() {
    let g = start(SaslSettings {
        session_lifetime: Some(Duration::from_millis(800)),
        ..settings()
    })
    .await;
    let mut c = client(&g).await;
    let AuthOutcome::Authenticated {
        session_lifetime_ms,
    } = c.plain(V2, "alice", "alice-secret").await.unwrap()
    else {
        panic!("not authenticated");
    };
    assert!(
        (1..=800).contains(&session_lifetime_ms),
        "{session_lifetime_ms}"
    );
    // SaslAuthenticate v0 cannot carry the lifetime.
    let mut old = client(&g).await;
    assert_eq!(
        old.plain(Flow::Authenticate(0), "alice", "alice-secret")
            .await
            .unwrap(),
        AuthOutcome::Authenticated {
            session_lifetime_ms: 0
        }
    );

    // Before expiry: re-authenticate, keep working.
    let again = c.plain(V2, "alice", "alice-secret").await.unwrap();
    assert!(again.is_authenticated(), "{again:?}");
    assert!(serves(&mut c).await);

    // After expiry: only re-authentication is allowed, and it works.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let again = c
        .scram(V2, ScramHash::Sha256, "alice", "alice-secret")
        .await
        .unwrap();
    // Another mechanism than the session's is refused.
    assert!(
        matches!(again, AuthOutcome::HandshakeRejected { error_code, .. } if error_code == ErrorCode::UNSUPPORTED_SASL_MECHANISM.code()),
        "{again:?}"
    );
    let mut c = client(&g).await;
    assert!(
        c.plain(V2, "alice", "alice-secret")
            .await
            .unwrap()
            .is_authenticated()
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let again = c.plain(V2, "alice", "alice-secret").await.unwrap();
    assert!(again.is_authenticated(), "{again:?}");
    assert!(serves(&mut c).await);

    let text = g.metrics.encode().unwrap();
    assert!(
        text.contains(r#"kafka_gateway_sasl_reauthentications_total{listener="SASL"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn re_authentication_must_prove_the_same_principal() {
    let g = start(settings()).await;
    let mut c = authenticated_as(&g, "alice", "alice-secret").await;
    let outcome = c.plain(V2, "bob", "bob-secret").await.unwrap();
    assert_failed(&outcome);
    assert!(c.closed_by_peer().await);
}

#[tokio::test]
async fn a_session_past_its_lifetime_is_closed_on_its_next_request() {
    let g = start(SaslSettings {
        session_lifetime: Some(Duration::from_millis(1500)),
        ..settings()
    })
    .await;
    let mut c = authenticated_as(&g, "alice", "alice-secret").await;
    assert!(serves(&mut c).await);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(c.request(12, metadata()).await.unwrap().is_none());
    let text = g.metrics.encode().unwrap();
    assert!(
        text.contains(r#"kafka_gateway_sasl_expired_session_closes_total{listener="SASL"} 1"#),
        "{text}"
    );
}

/// Sends a wrong PLAIN password on a new connection; returns how long the answer took.
async fn failed_plain(g: &Gateway) -> Duration {
    let mut c = client(g).await;
    assert!(c.start(V2, "PLAIN").await.unwrap().is_none());
    let started = Instant::now();
    let reply = c.authenticate(2, b"\0alice\0wrong").await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(
        reply.error_code,
        ErrorCode::SASL_AUTHENTICATION_FAILED.code()
    );
    assert!(c.closed_by_peer().await);
    took
}

#[tokio::test]
async fn the_failure_delay_grows_with_each_rejection() {
    let base = Duration::from_millis(200);
    let g = start(SaslSettings {
        failure_delay: base,
        failure_delay_max: Duration::from_secs(5),
        ..settings()
    })
    .await;
    let first = failed_plain(&g).await;
    let _second = failed_plain(&g).await;
    let third = failed_plain(&g).await;
    assert!(first >= base, "first answer after {first:?}");
    assert!(third >= 2 * base, "third answer after {third:?}");
    // A success from the same address is not delayed and does not reset the delay: one
    // valid account must not buy another round of fast guesses.
    let started = Instant::now();
    let _ = authenticated_as(&g, "alice", "alice-secret").await;
    assert!(
        started.elapsed() < base,
        "a success waited {:?}",
        started.elapsed()
    );
    let after = failed_plain(&g).await;
    assert!(
        after >= 4 * base,
        "after a success {after:?}, third {third:?}"
    );
}

/// The close that follows a refusal comes `close_linger` after the answer (default
/// 200 ms), not with it: a client reading the answer late must still find it before the
/// end of the connection (kafka-python drops data that arrives with the close).
#[tokio::test]
async fn the_close_after_a_refusal_lingers_behind_the_answer() {
    let linger = kafka_broker::Timeouts::default().close_linger;
    assert!(!linger.is_zero());
    let g = start(settings()).await;
    let mut c = client(&g).await;
    assert!(c.start(V2, "PLAIN").await.unwrap().is_none());
    let reply = c.authenticate(2, b"\0alice\0wrong").await.unwrap().unwrap();
    let answered = Instant::now();
    assert_eq!(
        reply.error_code,
        ErrorCode::SASL_AUTHENTICATION_FAILED.code()
    );
    assert!(c.closed_by_peer().await);
    let held = answered.elapsed();
    assert!(
        held >= linger.mul_f64(0.9),
        "closed {held:?} after the answer"
    );
}

#[tokio::test]
async fn an_unknown_mechanism_is_refused_with_the_list_and_closes() {
    let g = start(settings()).await;
    let mut c = client(&g).await;
    let outcome = c.start(V2, "GSSAPI").await.unwrap();
    let Some(AuthOutcome::HandshakeRejected {
        error_code,
        mechanisms,
    }) = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(error_code, ErrorCode::UNSUPPORTED_SASL_MECHANISM.code());
    assert_eq!(mechanisms, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(c.closed_by_peer().await);

    // Names are case-sensitive, as in Kafka.
    let mut c = client(&g).await;
    assert!(matches!(
        c.start(V2, "plain").await.unwrap(),
        Some(AuthOutcome::HandshakeRejected { .. })
    ));
}

/// A new connection that has sent `scram`'s client-first; the server-first message.
async fn scram_started(g: &Gateway, scram: &ScramClient) -> (SaslClient<TcpStream>, Vec<u8>) {
    let mut c = client(g).await;
    let hash = if scram.hash() == ScramHash::Sha256 {
        "SCRAM-SHA-256"
    } else {
        "SCRAM-SHA-512"
    };
    assert!(c.start(V2, hash).await.unwrap().is_none());
    let first = c
        .authenticate(2, &scram.client_first())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.error_code, 0);
    (c, first.auth_bytes)
}

/// Sends `token` as the last SCRAM message: it must be rejected, and the connection close.
async fn scram_final_rejected(mut c: SaslClient<TcpStream>, token: &[u8]) {
    let reply = c.authenticate(2, token).await.unwrap().unwrap();
    assert_eq!(
        reply.error_code,
        ErrorCode::SASL_AUTHENTICATION_FAILED.code()
    );
    assert!(c.closed_by_peer().await);
}

#[tokio::test]
async fn scram_with_a_forged_nonce_fails() {
    let g = start(settings()).await;
    let mut scram = ScramClient::new(ScramHash::Sha256, "bob", "bob-secret");
    let (c, server_first) = scram_started(&g, &scram).await;
    // The right proof over a nonce the server never sent.
    let forged = scram
        .client_final_with_nonce(&server_first, "forged-nonce-0123456789")
        .unwrap();
    scram_final_rejected(c, &forged).await;
}

#[tokio::test]
async fn a_replayed_scram_client_final_fails_on_a_new_connection() {
    let g = start(settings()).await;
    // A complete, successful exchange whose client-final is recorded.
    let mut scram = ScramClient::new(ScramHash::Sha512, "bob", "bob-secret");
    let (mut c, server_first) = scram_started(&g, &scram).await;
    let recorded = scram.client_final(&server_first).unwrap();
    let last = c.authenticate(2, &recorded).await.unwrap().unwrap();
    assert_eq!(last.error_code, 0);
    scram.verify_server_final(&last.auth_bytes).unwrap();

    // The same client-first (same nonce) and the recorded client-final elsewhere.
    let (c, _) = scram_started(&g, &scram).await;
    scram_final_rejected(c, &recorded).await;
}

#[tokio::test]
async fn a_token_over_max_token_bytes_fails() {
    let g = start_with(
        settings(),
        SaslConfig {
            max_token_bytes: 1024,
            ..SaslConfig::default()
        },
    )
    .await;
    let mut c = client(&g).await;
    assert!(c.start(V2, "PLAIN").await.unwrap().is_none());
    let mut token = b"\0alice\0".to_vec();
    token.resize(2048, b'x');
    let reply = c.authenticate(2, &token).await.unwrap().unwrap();
    assert_eq!(
        reply.error_code,
        ErrorCode::SASL_AUTHENTICATION_FAILED.code()
    );
    assert!(c.closed_by_peer().await);
    let text = g.metrics.encode().unwrap();
    assert!(
        text.contains(r#"kafka_gateway_sasl_authentication_failures_total{kind="too_large"} 1"#)
    );

    // Raw flow: closed.
    let mut c = client(&g).await;
    assert!(c.start(Flow::Raw, "PLAIN").await.unwrap().is_none());
    c.send_frame(&token).await.unwrap();
    assert!(c.closed_by_peer().await);
}

#[tokio::test]
async fn frames_over_max_receive_size_close_until_authenticated() {
    let g = start(SaslSettings {
        max_receive_size: 4096,
        ..settings()
    })
    .await;
    let mut c = client(&g).await;
    c.send_frame(&vec![0u8; 8192]).await.unwrap();
    assert!(c.closed_by_peer().await);

    // Authenticated, the same size is an ordinary request.
    let mut c = authenticated_as(&g, "alice", "alice-secret").await;
    let big: RequestBody = MetadataRequest {
        topics: Some(
            (0..40)
                .map(|i| MetadataRequestTopic {
                    name: Some(ByteString::from(format!("{i:0>200}"))),
                    ..Default::default()
                })
                .collect(),
        ),
        allow_auto_topic_creation: false,
        ..Default::default()
    }
    .into();
    assert!(matches!(
        c.request(12, big).await.unwrap(),
        Some(ResponseBody::Metadata(_))
    ));
}

#[tokio::test]
async fn requests_before_authentication_close_the_connection() {
    let g = start(settings()).await;
    let mut c = client(&g).await;
    assert!(
        c.api_versions().await.unwrap().is_some(),
        "ApiVersions is allowed"
    );
    assert!(c.request(12, metadata()).await.unwrap().is_none());

    let mut c = client(&g).await;
    let produce: RequestBody = ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        ..Default::default()
    }
    .into();
    assert!(c.request(9, produce).await.unwrap().is_none());

    // Between the handshake and the last token, too.
    let mut c = client(&g).await;
    assert!(c.start(V2, "SCRAM-SHA-256").await.unwrap().is_none());
    assert!(c.request(12, metadata()).await.unwrap().is_none());

    // SaslAuthenticate without a handshake.
    let mut c = client(&g).await;
    let reply = c.authenticate(2, b"\0alice\0alice-secret").await.unwrap();
    assert_eq!(
        reply.map(|r| r.error_code),
        Some(ErrorCode::ILLEGAL_SASL_STATE.code())
    );
    assert!(c.closed_by_peer().await);
}

#[tokio::test]
async fn an_idle_unauthenticated_connection_is_closed_after_the_timeout() {
    let g = start(SaslSettings {
        authentication_timeout: Duration::from_millis(300),
        ..settings()
    })
    .await;
    let started = Instant::now();
    let mut c = client(&g).await;
    assert!(c.closed_by_peer().await, "closed without sending anything");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // One that talks but does not authenticate, likewise.
    let mut c = client(&g).await;
    assert!(c.api_versions().await.unwrap().is_some());
    assert!(c.start(V2, "PLAIN").await.unwrap().is_none());
    assert!(c.closed_by_peer().await);

    // Authenticated in time: stays.
    let mut c = authenticated_as(&g, "alice", "alice-secret").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(serves(&mut c).await);
}

/// A PLAIN source that takes a while and records how many checks ran at once.
#[derive(Debug, Default)]
struct SlowPlain {
    running: AtomicUsize,
    most: AtomicUsize,
}

#[async_trait::async_trait]
impl PlainAuthenticator for SlowPlain {
    async fn authenticate(&self, username: &str, password: &str) -> Result<Identity, AuthFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if password == format!("{username}-secret") {
            Ok(Identity {
                name: username.into(),
                expires_at: None,
            })
        } else {
            Err(AuthFailure::new(FailureKind::BadCredentials, "bad"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_authentications_all_complete_within_the_cap() {
    let slow = Arc::new(SlowPlain::default());
    let authenticator = Authenticator::new(SaslConfig::default(), Some(slow.clone()), None, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = BrokerConfig {
        sasl: SaslSettings {
            max_concurrent_authentications: 4,
            authentication_timeout: Duration::from_secs(60),
            ..settings()
        },
        ..BrokerConfig::default()
    };
    let server = Server::new(config, stores())
        .listener(Listener::new("SASL", SecurityProtocol::SaslPlaintext))
        .authenticator(Arc::new(authenticator));
    tokio::spawn(server.serve(listener, std::future::pending()));

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        tasks.spawn(async move {
            let socket = TcpStream::connect(addr).await.unwrap();
            let mut c = SaslClient::new(socket).with_timeout(Duration::from_secs(60));
            let (user, password) = USERS[i % USERS.len()];
            let outcome = c.plain(V2, user, password).await.unwrap();
            assert!(outcome.is_authenticated(), "{i}: {outcome:?}");
            assert!(serves(&mut c).await);
        });
    }
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
        done += 1;
    }
    assert_eq!(done, 200);
    let most = slow.most.load(Ordering::SeqCst);
    assert!(
        (2..=4).contains(&most),
        "at most 4 checks at once, and more than one: {most}"
    );
}

async fn describe(
    c: &mut SaslClient<TcpStream>,
    users: Option<&[&str]>,
) -> DescribeUserScramCredentialsResponse {
    let body = DescribeUserScramCredentialsRequest {
        users: users.map(|u| {
            u.iter()
                .map(|n| UserName {
                    name: ByteString::from(*n),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    };
    match c.request(0, body.into()).await.unwrap() {
        Some(ResponseBody::DescribeUserScramCredentials(r)) => r,
        other => panic!("{other:?}"),
    }
}

async fn alter(
    c: &mut SaslClient<TcpStream>,
    deletions: Vec<ScramCredentialDeletion>,
    upsertions: Vec<ScramCredentialUpsertion>,
) -> Vec<(String, i16)> {
    let body = AlterUserScramCredentialsRequest {
        deletions,
        upsertions,
        ..Default::default()
    };
    match c.request(0, body.into()).await.unwrap() {
        Some(ResponseBody::AlterUserScramCredentials(AlterUserScramCredentialsResponse {
            results,
            ..
        })) => results
            .into_iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn upsertion(
    user: &str,
    hash: ScramHash,
    password: &str,
    iterations: i32,
) -> ScramCredentialUpsertion {
    let salt = format!("salt-of-{user}").into_bytes();
    let salted = scram_salted_password(hash, password, &salt, iterations.max(1) as u32);
    ScramCredentialUpsertion {
        name: ByteString::from(user),
        mechanism: hash.id(),
        iterations,
        salt: Bytes::from(salt),
        salted_password: Bytes::from(salted),
        ..Default::default()
    }
}

fn deletion(user: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion {
        name: ByteString::from(user),
        mechanism,
        ..Default::default()
    }
}

#[tokio::test]
async fn scram_credential_apis_for_super_users_only() {
    let g = start(settings()).await;

    // Not a super user: 31 at the top (Describe) and per user (Alter).
    let mut bob = authenticated_as(&g, "bob", "bob-secret").await;
    let r = describe(&mut bob, None).await;
    assert_eq!(r.error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
    assert!(r.results.is_empty());
    let r = alter(
        &mut bob,
        vec![deletion("alice", 1)],
        vec![upsertion("carol", ScramHash::Sha256, "carol-secret", 4096)],
    )
    .await;
    assert_eq!(
        r,
        [
            (
                "alice".to_string(),
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code()
            ),
            (
                "carol".to_string(),
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code()
            )
        ]
    );

    let mut admin = authenticated_as(&g, "admin", "admin-secret").await;
    // Create carol's credential, then use it.
    let r = alter(
        &mut admin,
        vec![],
        vec![upsertion("carol", ScramHash::Sha256, "carol-secret", 4096)],
    )
    .await;
    assert_eq!(r, [("carol".to_string(), 0)]);
    let mut c = client(&g).await;
    let outcome = c
        .scram(V2, ScramHash::Sha256, "carol", "carol-secret")
        .await
        .unwrap();
    assert!(outcome.is_authenticated(), "{outcome:?}");
    assert!(serves(&mut c).await);

    let r = describe(&mut admin, Some(&["carol"])).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.results[0].error_code, 0);
    let infos: Vec<_> = r.results[0]
        .credential_infos
        .iter()
        .map(|i| (i.mechanism, i.iterations))
        .collect();
    assert_eq!(infos, [(1, 4096)]);

    let all = describe(&mut admin, None).await;
    let names: Vec<_> = all.results.iter().map(|r| r.user.to_string()).collect();
    assert_eq!(names, ["admin", "alice", "bob", "carol"]);

    // Per-user codes of Describe.
    let r = describe(&mut admin, Some(&["carol", "nobody", "carol"])).await;
    let codes: Vec<_> = r
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(
        codes,
        [
            ("carol".to_string(), ErrorCode::DUPLICATE_RESOURCE.code()),
            ("nobody".to_string(), ErrorCode::RESOURCE_NOT_FOUND.code())
        ]
    );

    // Per-user codes of Alter.
    let r = alter(
        &mut admin,
        vec![
            deletion("nobody", 1),
            deletion("dave", 1),
            deletion("eve", 9),
        ],
        vec![
            upsertion("dave", ScramHash::Sha256, "d", 4096),
            upsertion("frank", ScramHash::Sha512, "f", 10),
            upsertion("gina", ScramHash::Sha512, "g", 20_000),
            upsertion("", ScramHash::Sha512, "x", 4096),
            ScramCredentialUpsertion {
                salted_password: Bytes::from_static(b"short"),
                ..upsertion("hank", ScramHash::Sha256, "h", 4096)
            },
        ],
    )
    .await;
    assert_eq!(
        r,
        [
            ("nobody".to_string(), ErrorCode::RESOURCE_NOT_FOUND.code()),
            ("dave".to_string(), ErrorCode::DUPLICATE_RESOURCE.code()),
            (
                "eve".to_string(),
                ErrorCode::UNSUPPORTED_SASL_MECHANISM.code()
            ),
            (
                "frank".to_string(),
                ErrorCode::UNACCEPTABLE_CREDENTIAL.code()
            ),
            (
                "gina".to_string(),
                ErrorCode::UNACCEPTABLE_CREDENTIAL.code()
            ),
            (String::new(), ErrorCode::UNACCEPTABLE_CREDENTIAL.code()),
            (
                "hank".to_string(),
                ErrorCode::UNACCEPTABLE_CREDENTIAL.code()
            ),
        ]
    );

    // Deleting carol's credential ends her SCRAM logins.
    let r = alter(&mut admin, vec![deletion("carol", 1)], vec![]).await;
    assert_eq!(r, [("carol".to_string(), 0)]);
    let mut c = client(&g).await;
    assert_failed(
        &c.scram(V2, ScramHash::Sha256, "carol", "carol-secret")
            .await
            .unwrap(),
    );
    let r = describe(&mut admin, Some(&["carol"])).await;
    assert_eq!(
        r.results[0].error_code,
        ErrorCode::RESOURCE_NOT_FOUND.code()
    );

    // The mechanisms are still offered: a sanity check of the test's gateway.
    assert_eq!(
        Mechanism::from_name("SCRAM-SHA-256"),
        Some(Mechanism::ScramSha256)
    );
}

#[tokio::test]
async fn a_sasl_listener_without_an_authenticator_does_not_serve() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let result = Server::new(BrokerConfig::default(), stores())
        .listener(Listener::new("SASL", SecurityProtocol::SaslPlaintext))
        .serve(listener, std::future::pending())
        .await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("no authenticator"), "{err}");
}

#[tokio::test]
async fn a_plaintext_listener_answers_sasl_requests_with_illegal_state() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(BrokerConfig::default(), stores());
    tokio::spawn(server.serve(listener, std::future::pending()));
    let mut c = SaslClient::new(TcpStream::connect(addr).await.unwrap());
    let (code, _) = c.handshake(1, "PLAIN").await.unwrap().unwrap();
    assert_eq!(code, ErrorCode::ILLEGAL_SASL_STATE.code());
    let reply = c.authenticate(2, b"\0a\0b").await.unwrap().unwrap();
    assert_eq!(reply.error_code, ErrorCode::ILLEGAL_SASL_STATE.code());
    assert!(serves(&mut c).await, "the connection stays usable");
    // Anonymous is no super user.
    let r = describe(&mut c, None).await;
    assert_eq!(r.error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
}

/// An unsigned JWT (`alg: none`) with `claims`.
fn unsecured_token(claims: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none"}"#),
        b64.encode(claims.as_bytes())
    )
}

#[tokio::test]
async fn oauthbearer_sessions_last_no_longer_than_their_token() {
    let oauth = OAuthValidator::new(OAuthConfig {
        allow_unsecured: true,
        clock_skew: Duration::ZERO,
        ..OAuthConfig::new(Jwks::default())
    });
    let g = start_full(
        SaslSettings {
            session_lifetime: Some(Duration::from_secs(60)),
            ..settings()
        },
        SaslConfig {
            mechanisms: Mechanism::ALL.to_vec(),
            ..SaslConfig::default()
        },
        Some(Arc::new(oauth)),
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = unsecured_token(&format!(r#"{{"sub":"carol","exp":{}}}"#, now + 4));
    let mut c = client(&g).await;
    let outcome = c.oauthbearer(V2, &token).await.unwrap();
    let AuthOutcome::Authenticated {
        session_lifetime_ms,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(
        (1..=4000).contains(&session_lifetime_ms),
        "the token's 4 s, not the configured 60 s: {session_lifetime_ms}"
    );
    assert!(serves(&mut c).await);

    // A token without the principal claim: the error challenge, then the failure.
    let token = unsecured_token(&format!(r#"{{"exp":{}}}"#, now + 60));
    let mut c = client(&g).await;
    assert_failed(&c.oauthbearer(V2, &token).await.unwrap());
    assert!(c.closed_by_peer().await);
}
