//! Drives every SASL mechanism with arbitrary token sequences against an in-memory users
//! file and an OAUTHBEARER validator (test JWKS, unsecured tokens allowed so the claim
//! checks are reached).
//!
//! Input: the first byte picks the mechanism; the rest, split at 0xFF bytes (never valid in
//! any mechanism's messages), are the client's tokens. In a token sent after a challenge,
//! the bytes `NONCE` are replaced by the nonce the server just issued, so SCRAM's proof
//! check is reached rather than only the nonce comparison.
//!
//! Checks: no panic; at most one challenge per exchange; once an exchange reports Done or
//! Failed it is over and every later token fails; a failure's message never echoes the
//! password of the users file.
#![no_main]

use kafka_sasl::{
    Authenticator, Jwks, Mechanism, OAuthConfig, OAuthValidator, SaslConfig, ScramCredential,
    ScramMechanism, Step, UsersFile,
};
use libfuzzer_sys::fuzz_target;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, UNIX_EPOCH};

const PASSWORD: &str = "fuzz-password-xyzzy";

fn authenticator() -> &'static Authenticator {
    static AUTH: OnceLock<Authenticator> = OnceLock::new();
    AUTH.get_or_init(|| {
        let users = UsersFile::in_memory().with_plain_iterations(1);
        users.set_password("alice", PASSWORD).expect("set");
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let credential = ScramCredential::from_password(m, PASSWORD, 4096).expect("scram");
            users.set_scram("alice", credential).expect("set");
        }
        let users = Arc::new(users);
        let jwks = Jwks::from_json(include_bytes!(
            "../../crates/kafka-sasl/tests/fixtures/rsa2048.jwks.json"
        ))
        .expect("jwks");
        let mut oauth = OAuthConfig::new(jwks);
        oauth.allow_unsecured = true;
        oauth.issuer = Some("iss".into());
        oauth.audience = Some("aud".into());
        Authenticator::new(
            SaslConfig {
                mechanisms: Mechanism::ALL.to_vec(),
                max_token_bytes: 4096,
                ..SaslConfig::default()
            },
            Some(users.clone()),
            Some(users),
            Some(Arc::new(OAuthValidator::new(oauth))),
        )
    })
}

/// Runs a future that never waits (the in-memory stores answer at once).
fn run<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-memory exchange step waited"),
    }
}

fn replace_nonce(token: &[u8], challenge: &[u8]) -> Vec<u8> {
    let nonce = challenge
        .strip_prefix(b"r=")
        .and_then(|r| r.split(|&b| b == b',').next())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(token.len() + nonce.len());
    let mut rest = token;
    while let Some(i) = rest.windows(5).position(|w| w == b"NONCE") {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(nonce);
        rest = &rest[i + 5..];
    }
    out.extend_from_slice(rest);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let auth = authenticator();
    let mechanism = Mechanism::ALL[usize::from(pick) % Mechanism::ALL.len()];
    let mut exchange = auth.start(mechanism.name()).expect("offered");
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut challenges = 0;
    let mut last_challenge: Vec<u8> = Vec::new();
    let mut over = false;
    for token in rest.split(|&b| b == 0xFF).take(8) {
        let token = if last_challenge.is_empty() {
            token.to_vec()
        } else {
            replace_nonce(token, &last_challenge)
        };
        let step = run(exchange.step(auth, &token, now));
        match step {
            Step::Continue(challenge) => {
                assert!(!over, "a challenge after the end");
                challenges += 1;
                assert!(challenges <= 1, "{mechanism}: more than one challenge");
                last_challenge = challenge;
            }
            Step::Done { identity, .. } => {
                assert!(!over, "success after the end");
                assert!(!identity.name.is_empty());
                over = true;
            }
            Step::Failed(failure) => {
                assert!(!failure.message.contains(PASSWORD), "a secret in a message");
                over = true;
            }
        }
        assert_eq!(exchange.is_over(), over);
    }
});
