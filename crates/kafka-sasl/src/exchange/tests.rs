//! Exchanges driven through the public surface, with a SCRAM client written here.

use super::*;
use crate::scram::{ScramCredential, ScramMechanism, escape_username};
use crate::users_file::UsersFile;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use proptest::prelude::*;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn users() -> Arc<UsersFile> {
    static SHARED: std::sync::OnceLock<Arc<UsersFile>> = std::sync::OnceLock::new();
    SHARED.get_or_init(fresh_users).clone()
}

fn fresh_users() -> Arc<UsersFile> {
    let users = UsersFile::in_memory().with_plain_iterations(16);
    users.set_password("alice", "alice-secret").expect("set");
    for (mechanism, user, password) in [
        (ScramMechanism::Sha256, "alice", "pw-256"),
        (ScramMechanism::Sha512, "alice", "pw-512"),
        (ScramMechanism::Sha256, "we,ird=name", "odd"),
        (ScramMechanism::Sha512, "we,ird=name", "odd"),
    ] {
        // The users command's default iteration count: the stand-in of an unknown user
        // must look like these.
        let credential =
            ScramCredential::from_password(mechanism, password, crate::scram::DEFAULT_ITERATIONS)
                .expect("credential");
        users.set_scram(user, credential).expect("set");
    }
    Arc::new(users)
}

fn authenticator_with(users: Arc<UsersFile>) -> Authenticator {
    Authenticator::new(
        SaslConfig::default(),
        Some(users.clone()),
        Some(users),
        None,
    )
}

fn authenticator() -> Authenticator {
    authenticator_with(users())
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn failed(step: Step) -> AuthFailure {
    match step {
        Step::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn challenge(step: Step) -> Vec<u8> {
    match step {
        Step::Continue(c) => c,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

// ---- SCRAM client ----------------------------------------------------------------------

struct Client {
    mechanism: ScramMechanism,
    gs2: String,
    bare: String,
    password: String,
}

impl Client {
    fn new(mechanism: ScramMechanism, user: &str, password: &str) -> Client {
        Client::with_header(mechanism, "n,,", user, password)
    }

    fn with_header(mechanism: ScramMechanism, gs2: &str, user: &str, password: &str) -> Client {
        Client {
            mechanism,
            gs2: gs2.into(),
            bare: format!("n={},r=clientNonce0123456789", escape_username(user)),
            password: password.into(),
        }
    }

    fn first(&self) -> Vec<u8> {
        format!("{}{}", self.gs2, self.bare).into_bytes()
    }

    /// The client-final message and the server signature the client expects.
    fn last(&self, server_first: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.last_with_nonce(server_first, |nonce| nonce.to_owned())
    }

    /// [`Client::last`] sending `nonce_of(issued nonce)` as its nonce.
    fn last_with_nonce(
        &self,
        server_first: &[u8],
        nonce_of: impl Fn(&str) -> String,
    ) -> (Vec<u8>, Vec<u8>) {
        let server_first = std::str::from_utf8(server_first).expect("utf-8");
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0;
        for attribute in server_first.split(',') {
            let (k, v) = attribute.split_at(2);
            match k {
                "r=" => nonce = v,
                "s=" => salt = B64.decode(v).expect("salt"),
                "i=" => iterations = v.parse().expect("iterations"),
                _ => panic!("unexpected attribute {attribute}"),
            }
        }
        assert!(nonce.starts_with("clientNonce0123456789"));
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c={},r={}", B64.encode(&self.gs2), nonce_of(nonce));
        let auth_message = format!("{},{server_first},{without_proof}", self.bare);
        let signature = m.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        let server_signature = m.hmac(&server_key, auth_message.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        )
    }
}

async fn scram_login(auth: &Authenticator, client: &Client) -> Step {
    let mut exchange = auth.start(client.mechanism.name()).expect("offered");
    let server_first = challenge(exchange.step(auth, &client.first(), now()).await);
    let (last, _) = client.last(&server_first);
    exchange.step(auth, &last, now()).await
}

// ---- mechanisms ----------------------------------------------------------------------

#[test]
fn only_mechanisms_with_a_source_are_offered() {
    let users = users();
    let all = Authenticator::new(
        SaslConfig {
            mechanisms: Mechanism::ALL.to_vec(),
            ..SaslConfig::default()
        },
        Some(users.clone()),
        Some(users.clone()),
        None,
    );
    assert_eq!(
        all.mechanism_names(),
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    );
    assert!(all.start("OAUTHBEARER").is_none());
    assert!(all.start("plain").is_none(), "names are case-sensitive");
    assert!(all.start("GSSAPI").is_none());
    let plain_only = Authenticator::new(SaslConfig::default(), Some(users), None, None);
    assert_eq!(plain_only.mechanisms(), [Mechanism::Plain]);
    assert!(plain_only.start("SCRAM-SHA-256").is_none());
}

// ---- PLAIN -----------------------------------------------------------------------------

#[tokio::test]
async fn plain_accepts_the_right_password_only() {
    let auth = authenticator();
    let mut ok = auth.start("PLAIN").expect("offered");
    match ok.step(&auth, b"\0alice\0alice-secret", now()).await {
        Step::Done {
            identity,
            final_message,
        } => {
            assert_eq!(identity.name, "alice");
            assert!(final_message.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(ok.is_over());
    let again = failed(ok.step(&auth, b"\0alice\0alice-secret", now()).await);
    assert_eq!(again.kind, FailureKind::Malformed);

    let mut wrong = auth.start("PLAIN").expect("offered");
    let wrong = failed(wrong.step(&auth, b"\0alice\0nope", now()).await);
    let mut unknown = auth.start("PLAIN").expect("offered");
    let unknown = failed(unknown.step(&auth, b"\0mallory\0nope", now()).await);
    assert_eq!(wrong.kind, FailureKind::BadCredentials);
    assert_eq!(wrong, unknown);
    let mut other = auth.start("PLAIN").expect("offered");
    let other = failed(other.step(&auth, b"bob\0alice\0alice-secret", now()).await);
    assert_eq!(other.kind, FailureKind::BadCredentials);
}

#[tokio::test]
async fn tokens_over_the_limit_fail_before_parsing() {
    let auth = Authenticator::new(
        SaslConfig {
            max_token_bytes: 32,
            ..SaslConfig::default()
        },
        Some(users()),
        Some(users()),
        None,
    );
    let mut exchange = auth.start("PLAIN").expect("offered");
    let token = format!("\0alice\0{}", "x".repeat(40));
    assert_eq!(
        failed(exchange.step(&auth, token.as_bytes(), now()).await).kind,
        FailureKind::TooLarge
    );
    let mut exchange = auth.start("SCRAM-SHA-256").expect("offered");
    let token = format!("n,,n=alice,r={}", "x".repeat(40));
    assert_eq!(
        failed(exchange.step(&auth, token.as_bytes(), now()).await).kind,
        FailureKind::TooLarge
    );
}

// ---- SCRAM -----------------------------------------------------------------------------

#[tokio::test]
async fn scram_logs_in_with_both_hashes() {
    let auth = authenticator();
    for (mechanism, password) in [
        (ScramMechanism::Sha256, "pw-256"),
        (ScramMechanism::Sha512, "pw-512"),
    ] {
        let client = Client::new(mechanism, "alice", password);
        let mut exchange = auth.start(mechanism.name()).expect("offered");
        let server_first = challenge(exchange.step(&auth, &client.first(), now()).await);
        let text = String::from_utf8(server_first.clone()).expect("utf-8");
        let server_part = text
            .strip_prefix("r=clientNonce0123456789")
            .and_then(|r| r.split(',').next())
            .expect("nonce");
        assert!(
            server_part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "server nonce in URL-safe base64"
        );
        assert!(
            server_part.len() >= 24,
            "server adds at least 24 nonce characters"
        );
        let (last, expected) = client.last(&server_first);
        match exchange.step(&auth, &last, now()).await {
            Step::Done {
                identity,
                final_message,
            } => {
                assert_eq!(identity.name, "alice");
                assert_eq!(final_message, expected, "server signature");
            }
            other => panic!("{mechanism:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn scram_nonces_differ_between_exchanges() {
    let auth = authenticator();
    let client = Client::new(ScramMechanism::Sha256, "alice", "pw-256");
    let mut a = auth.start("SCRAM-SHA-256").expect("offered");
    let mut b = auth.start("SCRAM-SHA-256").expect("offered");
    let first_a = challenge(a.step(&auth, &client.first(), now()).await);
    let first_b = challenge(b.step(&auth, &client.first(), now()).await);
    assert_ne!(first_a, first_b);
}

#[tokio::test]
async fn scram_wrong_password_and_unknown_user_look_alike() {
    let auth = authenticator();
    for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let wrong = failed(scram_login(&auth, &Client::new(mechanism, "alice", "nope")).await);
        let unknown = failed(scram_login(&auth, &Client::new(mechanism, "ghost", "nope")).await);
        assert_eq!(wrong.kind, FailureKind::BadCredentials);
        assert_eq!(wrong, unknown);
        assert_eq!(
            wrong.final_message.as_deref(),
            Some(&b"e=invalid-proof"[..])
        );
        // A SHA-512 credential does not log in through SCRAM-SHA-256 and vice versa.
        let other = match mechanism {
            ScramMechanism::Sha256 => "pw-512",
            ScramMechanism::Sha512 => "pw-256",
        };
        let crossed = failed(scram_login(&auth, &Client::new(mechanism, "alice", other)).await);
        assert_eq!(crossed.kind, FailureKind::BadCredentials);
    }
}

fn salt_and_iterations(server_first: &[u8]) -> String {
    let text = String::from_utf8(server_first.to_vec()).expect("utf-8");
    text.split_once(",s=").expect("salt").1.to_string()
}

#[tokio::test]
async fn unknown_user_gets_a_stable_lookalike_challenge() {
    let auth = authenticator();
    let real = Client::new(ScramMechanism::Sha256, "alice", "x");
    let ghost = Client::new(ScramMechanism::Sha256, "ghost", "x");
    let other = Client::new(ScramMechanism::Sha256, "ghost2", "x");
    let mut seen = Vec::new();
    for client in [&real, &ghost, &ghost, &other] {
        let mut exchange = auth.start("SCRAM-SHA-256").expect("offered");
        seen.push(salt_and_iterations(&challenge(
            exchange.step(&auth, &client.first(), now()).await,
        )));
    }
    assert_eq!(seen[1], seen[2], "same fake salt at every attempt");
    assert_ne!(seen[1], seen[3], "different users, different fake salts");
    assert_ne!(seen[0], seen[1]);
    let shape = |s: &str| {
        let (salt, iterations) = s.split_once(",i=").expect("iterations");
        (
            B64.decode(salt).expect("salt").len(),
            iterations.to_string(),
        )
    };
    assert_eq!(
        shape(&seen[0]),
        shape(&seen[1]),
        "fake salt shaped like a real one"
    );

    // Another process (another secret) gives another fake salt.
    let elsewhere = authenticator_with(fresh_users());
    let mut exchange = elsewhere.start("SCRAM-SHA-256").expect("offered");
    let there = salt_and_iterations(&challenge(
        exchange.step(&elsewhere, &ghost.first(), now()).await,
    ));
    assert_ne!(there, seen[1]);
}

#[tokio::test]
async fn scram_forged_nonce_and_replay_fail() {
    let auth = authenticator();
    let client = Client::new(ScramMechanism::Sha256, "alice", "pw-256");

    // A proof computed for a nonce the server did not issue.
    let mut exchange = auth.start("SCRAM-SHA-256").expect("offered");
    let server_first = challenge(exchange.step(&auth, &client.first(), now()).await);
    let forged = String::from_utf8(server_first.clone())
        .expect("utf-8")
        .replacen(
            "r=clientNonce0123456789",
            "r=clientNonce0123456789forged",
            1,
        );
    let (last, _) = client.last(forged.as_bytes());
    assert_eq!(
        failed(exchange.step(&auth, &last, now()).await).kind,
        FailureKind::Malformed
    );

    // A client-final message that worked once, replayed in a new exchange.
    let mut first = auth.start("SCRAM-SHA-256").expect("offered");
    let server_first = challenge(first.step(&auth, &client.first(), now()).await);
    let (last, _) = client.last(&server_first);
    assert!(matches!(
        first.step(&auth, &last, now()).await,
        Step::Done { .. }
    ));
    let mut replay = auth.start("SCRAM-SHA-256").expect("offered");
    challenge(replay.step(&auth, &client.first(), now()).await);
    assert!(matches!(
        replay.step(&auth, &last, now()).await,
        Step::Failed(_)
    ));
}

#[tokio::test]
async fn scram_accepts_the_doubled_client_nonce_of_old_librdkafka() {
    let auth = authenticator();
    let client = Client::new(ScramMechanism::Sha512, "alice", "pw-512");
    // librdkafka before 2.6.1: client nonce + the issued nonce (which starts with it).
    let mut exchange = auth.start("SCRAM-SHA-512").expect("offered");
    let server_first = challenge(exchange.step(&auth, &client.first(), now()).await);
    let (last, _) = client.last_with_nonce(&server_first, |n| format!("clientNonce0123456789{n}"));
    assert!(matches!(
        exchange.step(&auth, &last, now()).await,
        Step::Done { .. }
    ));
    // Anything else in front, or the issued nonce cut short, is still refused.
    for nonce_of in [
        (|n: &str| format!("clientNonce012345678X{n}")) as fn(&str) -> String,
        |n: &str| format!("x{n}"),
        |n: &str| format!("clientNonce0123456789{}", &n[..n.len() - 1]),
        |n: &str| n[..n.len() - 1].to_owned(),
    ] {
        let mut exchange = auth.start("SCRAM-SHA-512").expect("offered");
        let server_first = challenge(exchange.step(&auth, &client.first(), now()).await);
        let (last, _) = client.last_with_nonce(&server_first, nonce_of);
        assert_eq!(
            failed(exchange.step(&auth, &last, now()).await).kind,
            FailureKind::Malformed
        );
    }
}

#[tokio::test]
async fn scram_header_and_username_forms() {
    let auth = authenticator();
    let ok = |step: Step| matches!(step, Step::Done { .. });
    for header in ["n,,", "y,,", "n,a=alice,"] {
        let client = Client::with_header(ScramMechanism::Sha256, header, "alice", "pw-256");
        assert!(ok(scram_login(&auth, &client).await), "{header}");
    }
    let escaped = Client::new(ScramMechanism::Sha512, "we,ird=name", "odd");
    match scram_login(&auth, &escaped).await {
        Step::Done { identity, .. } => assert_eq!(identity.name, "we,ird=name"),
        other => panic!("{other:?}"),
    }
    let refused_first = [
        &b"p=tls-unique,,n=alice,r=abc"[..],
        b"n,a=bob,n=alice,r=abc",
        b"n,,n=alice,r=abc,tokenauth=true",
        b"n,,n=alice,r=abc,ext=1",
        b"n,,m=x,n=alice,r=abc",
        b"n,,n=al=ice,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=alice",
        b"n,,r=abc,n=alice",
        b"x,,n=alice,r=abc",
        b"n,,n=alice,r=a\x7fb",
        b"n,,n=alice,r=\xff",
        b"",
    ];
    for token in refused_first {
        let mut exchange = auth.start("SCRAM-SHA-256").expect("offered");
        let failure = failed(exchange.step(&auth, token, now()).await);
        assert_ne!(failure.kind, FailureKind::Unavailable, "{token:?}");
        assert!(exchange.is_over());
    }
}

#[tokio::test]
async fn scram_final_message_checks() {
    let auth = authenticator();
    let client = Client::new(ScramMechanism::Sha256, "alice", "pw-256");
    let cases: [fn(&str) -> String; 6] = [
        |m| m.replacen("c=biws", "c=eSws", 1),
        |m| m.replacen(",p=", ",p=AAAA", 1),
        |m| m.split(",p=").next().unwrap_or_default().to_string(),
        |m| format!("{m}=="),
        |m| m.replacen("c=biws,", "", 1),
        |m| m.replacen(",r=", ",x=1,r=", 1),
    ];
    for (i, mutate) in cases.into_iter().enumerate() {
        let mut exchange = auth.start("SCRAM-SHA-256").expect("offered");
        let server_first = challenge(exchange.step(&auth, &client.first(), now()).await);
        let (last, _) = client.last(&server_first);
        let changed = mutate(std::str::from_utf8(&last).expect("utf-8"));
        assert!(
            matches!(
                exchange.step(&auth, changed.as_bytes(), now()).await,
                Step::Failed(_)
            ),
            "case {i}"
        );
    }
}

#[test]
fn rfc7677_test_vector() {
    // RFC 7677 section 3: user "user", password "pencil".
    let users = UsersFile::in_memory();
    let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
    let credential =
        ScramCredential::from_password_and_salt(ScramMechanism::Sha256, "pencil", &salt, 4096)
            .expect("credential");
    users.set_scram("user", credential).expect("set");
    block_on(async {
        let (pending, server_first) = crate::scram::server_first_with_nonce(
            ScramMechanism::Sha256,
            &users,
            &ScramBounds::default(),
            &[7; 32],
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .await
        .expect("server-first");
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (identity, server_final) = pending
            .verify_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .expect("proof accepted");
        assert_eq!(identity.name, "user");
        assert_eq!(
            server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    });
}

#[test]
fn credential_bounds() {
    let bounds = ScramBounds::default();
    let m = ScramMechanism::Sha256;
    let salted = [1u8; 32];
    assert!(ScramCredential::from_salted_password(m, &[0; 16], 4096, &salted, &bounds).is_ok());
    assert!(ScramCredential::from_salted_password(m, &[0; 16], 4095, &salted, &bounds).is_err());
    assert!(ScramCredential::from_salted_password(m, &[0; 16], 16385, &salted, &bounds).is_err());
    assert!(ScramCredential::from_salted_password(m, &[0; 4], 4096, &salted, &bounds).is_err());
    assert!(ScramCredential::from_salted_password(m, &[0; 16], 4096, &[1; 64], &bounds).is_err());
    assert!(
        ScramCredential::from_salted_password(
            ScramMechanism::Sha512,
            &[0; 16],
            4096,
            &[1; 64],
            &bounds
        )
        .is_ok()
    );
    assert!(ScramCredential::from_password(m, "pw", 100).is_err());
    let a = ScramCredential::from_password(m, "pw", 4096).expect("a");
    let b = ScramCredential::from_password(m, "pw", 4096).expect("b");
    assert_ne!(a.salt, b.salt, "fresh salt each time");
    assert!(!format!("{a:?}").contains(&format!("{:?}", a.stored_key)));
}

#[test]
fn store_credentials_outside_the_bounds_are_not_used() {
    let users = users();
    let auth = Authenticator::new(
        SaslConfig {
            // The stored credentials have DEFAULT_ITERATIONS (8192): below this floor.
            scram: ScramBounds {
                min_iterations: crate::scram::DEFAULT_ITERATIONS + 1,
                max_iterations: 16384,
            },
            ..SaslConfig::default()
        },
        None,
        Some(users),
        None,
    );
    let step = block_on(scram_login(
        &auth,
        &Client::new(ScramMechanism::Sha256, "alice", "pw-256"),
    ));
    assert_eq!(failed(step).kind, FailureKind::BadCredentials);
}

// ---- hostile input -----------------------------------------------------------------------

fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "[ -~]{0,120}".prop_map(String::into_bytes),
        "n,,n=[a-z]{1,8},r=[a-zA-Z0-9]{1,30}".prop_map(String::into_bytes),
        "c=biws,r=[a-zA-Z0-9+/]{1,60},p=[a-zA-Z0-9+/=]{0,90}".prop_map(String::into_bytes),
        "\\x00[a-z]{0,8}\\x00[a-z]{0,8}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_tokens_never_authenticate(
        mechanism in prop::sample::select(vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
        tokens in proptest::collection::vec(token(), 1..5),
    ) {
        let auth = authenticator_with(users());
        let mut exchange = auth.start(mechanism).expect("offered");
        let mut last = None;
        block_on(async {
            for t in &tokens {
                let step = exchange.step(&auth, t, now()).await;
                prop_assert!(!matches!(step, Step::Done { .. }), "{:?}", step);
                last = Some(step);
            }
            // Whatever is pending, one more random token ends it.
            if matches!(last, Some(Step::Continue(_))) {
                last = Some(exchange.step(&auth, b"junk", now()).await);
            }
            prop_assert!(matches!(last, Some(Step::Failed(_))), "{:?}", last);
            prop_assert!(exchange.is_over());
            Ok(())
        })?;
    }
}

// ---- OAUTHBEARER ---------------------------------------------------------------------------

fn unsecured_token(sub: &str, exp: u64) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(format!(r#"{{"sub":"{sub}","exp":{exp}}}"#).as_bytes())
    )
}

fn oauth_authenticator() -> Authenticator {
    let jwks =
        crate::oauth::Jwks::from_json(include_bytes!("../../tests/fixtures/rsa2048.jwks.json"))
            .expect("jwks");
    let mut config = crate::oauth::OAuthConfig::new(jwks);
    config.allow_unsecured = true;
    Authenticator::new(
        SaslConfig {
            mechanisms: vec![Mechanism::OAuthBearer],
            ..SaslConfig::default()
        },
        None,
        None,
        Some(Arc::new(crate::oauth::OAuthValidator::new(config))),
    )
}

fn epoch_secs() -> u64 {
    now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

#[tokio::test]
async fn oauthbearer_accepts_a_valid_token() {
    let auth = oauth_authenticator();
    assert_eq!(auth.mechanism_names(), ["OAUTHBEARER"]);
    let exp = epoch_secs() + 600;
    for header in ["n,,", "n,a=alice,"] {
        let mut exchange = auth.start("OAUTHBEARER").expect("offered");
        let message = format!(
            "{header}\x01auth=Bearer {}\x01\x01",
            unsecured_token("alice", exp)
        );
        match exchange.step(&auth, message.as_bytes(), now()).await {
            Step::Done {
                identity,
                final_message,
            } => {
                assert_eq!(identity.name, "alice");
                assert_eq!(
                    identity.expires_at,
                    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(exp))
                );
                assert!(final_message.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn oauthbearer_bad_token_gets_the_error_document_then_fails() {
    let auth = oauth_authenticator();
    let expired = unsecured_token("alice", epoch_secs() - 3600);
    let message = format!("n,,\x01auth=Bearer {expired}\x01\x01");
    let mut exchange = auth.start("OAUTHBEARER").expect("offered");
    let document = challenge(exchange.step(&auth, message.as_bytes(), now()).await);
    let parsed: serde_json::Value = serde_json::from_slice(&document).expect("json");
    assert_eq!(parsed["status"], "invalid_token");
    let failure = failed(exchange.step(&auth, b"\x01", now()).await);
    assert_eq!(failure.kind, FailureKind::BadCredentials);
    assert!(failure.message.contains("expired"));
    assert!(!failure.message.contains(&expired));

    // Anything but the acknowledgement after the error document is malformed.
    let mut exchange = auth.start("OAUTHBEARER").expect("offered");
    challenge(exchange.step(&auth, message.as_bytes(), now()).await);
    assert_eq!(
        failed(exchange.step(&auth, message.as_bytes(), now()).await).kind,
        FailureKind::Malformed
    );
}

#[tokio::test]
async fn oauthbearer_refuses_malformed_messages_and_other_authzid() {
    let auth = oauth_authenticator();
    let token = unsecured_token("alice", epoch_secs() + 600);
    let mut exchange = auth.start("OAUTHBEARER").expect("offered");
    let message = format!("n,a=bob,\x01auth=Bearer {token}\x01\x01");
    assert_eq!(
        failed(exchange.step(&auth, message.as_bytes(), now()).await).kind,
        FailureKind::BadCredentials
    );
    let mut exchange = auth.start("OAUTHBEARER").expect("offered");
    assert_eq!(
        failed(exchange.step(&auth, token.as_bytes(), now()).await).kind,
        FailureKind::Malformed
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_oauthbearer_messages_never_authenticate(
        tokens in proptest::collection::vec(prop_oneof![
            token(),
            "n,,\\x01auth=Bearer [A-Za-z0-9._-]{0,80}\\x01\\x01".prop_map(String::into_bytes),
            Just(b"\x01".to_vec()),
        ], 1..4),
    ) {
        let auth = oauth_authenticator();
        let mut exchange = auth.start("OAUTHBEARER").expect("offered");
        block_on(async {
            let mut last = None;
            for t in &tokens {
                let step = exchange.step(&auth, t, now()).await;
                prop_assert!(!matches!(step, Step::Done { .. }), "{:?}", step);
                last = Some(step);
            }
            if matches!(last, Some(Step::Continue(_))) {
                last = Some(exchange.step(&auth, b"\x01", now()).await);
            }
            prop_assert!(matches!(last, Some(Step::Failed(_))), "{:?}", last);
            Ok(())
        })?;
    }
}
