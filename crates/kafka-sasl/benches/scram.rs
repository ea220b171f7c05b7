//! One full server-side SCRAM exchange (both hashes, 4096 iterations) and one PLAIN check
//! against the users file. The SCRAM server does no PBKDF2 (the client does), so its cost
//! is a few HMACs and the store lookup; the PLAIN check runs the full PBKDF2.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use criterion::{Criterion, criterion_group, criterion_main};
use kafka_sasl::{Authenticator, SaslConfig, ScramCredential, ScramMechanism, Step, UsersFile};
use std::sync::Arc;
use std::time::SystemTime;

fn hmac(m: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let alg = match m {
        ScramMechanism::Sha256 => ring::hmac::HMAC_SHA256,
        ScramMechanism::Sha512 => ring::hmac::HMAC_SHA512,
    };
    ring::hmac::sign(&ring::hmac::Key::new(alg, key), data)
        .as_ref()
        .to_vec()
}

fn hash(m: ScramMechanism, data: &[u8]) -> Vec<u8> {
    let alg = match m {
        ScramMechanism::Sha256 => &ring::digest::SHA256,
        ScramMechanism::Sha512 => &ring::digest::SHA512,
    };
    ring::digest::digest(alg, data).as_ref().to_vec()
}

/// A client-final message for `server_first`, computed from the client's keys (the
/// client's PBKDF2 is done once, outside the measurement).
fn client_final(m: ScramMechanism, salted: &[u8], bare: &str, server_first: &[u8]) -> Vec<u8> {
    let server_first = std::str::from_utf8(server_first).expect("utf-8");
    let nonce = server_first
        .strip_prefix("r=")
        .and_then(|r| r.split(',').next())
        .expect("nonce");
    let client_key = hmac(m, salted, b"Client Key");
    let stored_key = hash(m, &client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let signature = hmac(m, &stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    format!("{without_proof},p={}", B64.encode(proof)).into_bytes()
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let users = UsersFile::in_memory();
    users.set_password("alice", "plain-password").expect("set");
    let salt = [9u8; 32];
    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let credential = ScramCredential::from_password_and_salt(m, "scram-password", &salt, 4096)
            .expect("credential");
        users.set_scram("alice", credential).expect("set");
    }
    let users = Arc::new(users);
    let auth = Authenticator::new(
        SaslConfig::default(),
        Some(users.clone()),
        Some(users),
        None,
    );

    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let salted = m.salted_password(b"scram-password", &salt, 4096);
        let bare = "n=alice,r=benchClientNonce0123456789";
        let first = format!("n,,{bare}").into_bytes();
        c.bench_function(
            &format!("{} exchange, server side, 4096 iterations", m.name()),
            |b| {
                b.iter(|| {
                    runtime.block_on(async {
                        let mut exchange = auth.start(m.name()).expect("offered");
                        let now = SystemTime::now();
                        let Step::Continue(server_first) = exchange.step(&auth, &first, now).await
                        else {
                            panic!("no challenge");
                        };
                        let last = client_final(m, &salted, bare, &server_first);
                        let step = exchange.step(&auth, &last, now).await;
                        assert!(matches!(step, Step::Done { .. }));
                    })
                })
            },
        );
    }

    let mut group = c.benchmark_group("plain");
    group.sample_size(10);
    group.bench_function(
        "PLAIN check against the users file (PBKDF2-HMAC-SHA-512)",
        |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let mut exchange = auth.start("PLAIN").expect("offered");
                    let step = exchange
                        .step(&auth, b"\0alice\0plain-password", SystemTime::now())
                        .await;
                    assert!(matches!(step, Step::Done { .. }));
                })
            })
        },
    );
    group.finish();
}

criterion_group!(scram, benches);
criterion_main!(scram);
