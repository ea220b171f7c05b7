//! Tokens minted here with `ring`: ECDSA keys generated per test, RSA from a fixed test key.

use super::*;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, RsaKeyPair};
use serde_json::json;

const RSA_PKCS8: &[u8] = include_bytes!("../../tests/fixtures/rsa2048.pk8");
const RSA_JWKS: &[u8] = include_bytes!("../../tests/fixtures/rsa2048.jwks.json");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

impl Signer {
    fn rsa() -> Signer {
        Signer::Rsa(RsaKeyPair::from_pkcs8(RSA_PKCS8).expect("rsa key"))
    }

    fn ec(alg: &'static signature::EcdsaSigningAlgorithm) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("generate");
        Signer::Ec(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("ec key"))
    }

    /// The public half as a JWK.
    fn jwk(&self, kid: Option<&str>) -> Value {
        match self {
            Signer::Rsa(_) => {
                let doc: Value = serde_json::from_slice(RSA_JWKS).expect("fixture");
                let mut key = doc["keys"][0].clone();
                match kid {
                    Some(kid) => key["kid"] = json!(kid),
                    None => {
                        key.as_object_mut().expect("object").remove("kid");
                    }
                }
                key
            }
            Signer::Ec(pair) => {
                let point = pair.public_key().as_ref();
                let len = (point.len() - 1) / 2;
                let crv = if len == 32 { "P-256" } else { "P-384" };
                let mut key = json!({
                    "kty": "EC", "crv": crv,
                    "x": b64(&point[1..=len]), "y": b64(&point[1 + len..]),
                });
                if let Some(kid) = kid {
                    key["kid"] = json!(kid);
                }
                key
            }
        }
    }

    fn sign(&self, alg: &str, message: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match self {
            Signer::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding = match alg {
                    "RS256" => &signature::RSA_PKCS1_SHA256,
                    "RS384" => &signature::RSA_PKCS1_SHA384,
                    "RS512" => &signature::RSA_PKCS1_SHA512,
                    "PS256" => &signature::RSA_PSS_SHA256,
                    "PS384" => &signature::RSA_PSS_SHA384,
                    "PS512" => &signature::RSA_PSS_SHA512,
                    other => panic!("not an RSA alg: {other}"),
                };
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, message, &mut sig).expect("sign");
                sig
            }
            Signer::Ec(pair) => pair.sign(&rng, message).expect("sign").as_ref().to_vec(),
        }
    }
}

fn jwks(keys: Vec<Value>) -> Jwks {
    Jwks::from_json(json!({ "keys": keys }).to_string().as_bytes()).expect("jwks")
}

fn mint(signer: &Signer, header: Value, claims: Value) -> String {
    let alg = header["alg"].as_str().expect("alg").to_string();
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let sig = signer.sign(&alg, signed.as_bytes());
    format!("{signed}.{}", b64(&sig))
}

const NOW: u64 = 1_800_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn claims() -> Value {
    json!({ "sub": "alice", "exp": NOW + 300, "iat": NOW - 10, "iss": "https://idp", "aud": ["kafka", "other"] })
}

fn validator(jwks: Jwks) -> OAuthValidator {
    OAuthValidator::new(OAuthConfig::new(jwks))
}

fn refused(v: &OAuthValidator, token: &str) -> String {
    v.validate(token, now()).expect_err("refused").message
}

#[test]
fn every_rsa_alg_verifies_with_and_without_kid() {
    let signer = Signer::rsa();
    let with_kid = validator(Jwks::from_json(RSA_JWKS).expect("fixture"));
    let without_kid = validator(jwks(vec![signer.jwk(None)]));
    for alg in ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"] {
        let token = mint(&signer, json!({"alg": alg, "kid": "rsa-test"}), claims());
        let identity = with_kid.validate(&token, now()).expect(alg);
        assert_eq!(identity.name, "alice");
        assert_eq!(
            identity.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(NOW + 300))
        );
        let token = mint(&signer, json!({"alg": alg}), claims());
        assert!(
            without_kid.validate(&token, now()).is_ok(),
            "{alg} without kid"
        );
    }
}

#[test]
fn ecdsa_algs_verify_and_pick_the_key_by_kid() {
    let p256 = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let p256b = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let p384 = Signer::ec(&signature::ECDSA_P384_SHA384_FIXED_SIGNING);
    let v = validator(jwks(vec![
        p256.jwk(Some("a")),
        p256b.jwk(Some("b")),
        p384.jwk(Some("c")),
    ]));
    assert!(
        v.validate(
            &mint(&p256, json!({"alg": "ES256", "kid": "a"}), claims()),
            now()
        )
        .is_ok()
    );
    assert!(
        v.validate(
            &mint(&p256b, json!({"alg": "ES256", "kid": "b"}), claims()),
            now()
        )
        .is_ok()
    );
    assert!(
        v.validate(
            &mint(&p384, json!({"alg": "ES384", "kid": "c"}), claims()),
            now()
        )
        .is_ok()
    );
    assert!(
        v.validate(&mint(&p384, json!({"alg": "ES384"}), claims()), now())
            .is_ok(),
        "only P-384 key"
    );
    // Signed by one key, naming another.
    let crossed = mint(&p256, json!({"alg": "ES256", "kid": "b"}), claims());
    assert!(refused(&v, &crossed).contains("signature"));
    // No kid and two keys fit: refused rather than tried in turn.
    assert!(refused(&v, &mint(&p256, json!({"alg": "ES256"}), claims())).contains("several"));
    assert!(
        refused(
            &v,
            &mint(&p256, json!({"alg": "ES256", "kid": "zz"}), claims())
        )
        .contains("kid")
    );
    // An algorithm that does not fit the named key.
    assert!(
        refused(
            &v,
            &mint(&p384, json!({"alg": "ES384", "kid": "a"}), claims())
        )
        .contains("kid")
    );
}

#[test]
fn tampering_is_detected() {
    let signer = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let v = validator(jwks(vec![signer.jwk(None)]));
    let token = mint(&signer, json!({"alg": "ES256"}), claims());
    let parts: Vec<&str> = token.split('.').collect();
    let mut other = claims();
    other["sub"] = json!("admin");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64(other.to_string().as_bytes()),
        parts[2]
    );
    assert!(refused(&v, &forged).contains("signature"));
    for broken in [
        format!("{}.{}", parts[0], parts[1]),
        format!("{token}.x"),
        format!("{}.{}.!!", parts[0], parts[1]),
        "a.b.c".to_string(),
        String::new(),
    ] {
        assert!(v.validate(&broken, now()).is_err(), "{broken}");
    }
}

#[test]
fn key_alg_must_agree_with_the_token() {
    let signer = Signer::rsa();
    let mut key = signer.jwk(Some("k"));
    key["alg"] = json!("RS256");
    let v = validator(jwks(vec![key]));
    assert!(
        v.validate(
            &mint(&signer, json!({"alg": "RS256", "kid": "k"}), claims()),
            now()
        )
        .is_ok()
    );
    assert!(
        v.validate(
            &mint(&signer, json!({"alg": "PS256", "kid": "k"}), claims()),
            now()
        )
        .is_err()
    );
}

fn unsecured(claims: Value) -> String {
    format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(claims.to_string().as_bytes())
    )
}

#[test]
fn unsecured_tokens_only_when_allowed() {
    let signer = Signer::rsa();
    let strict = validator(jwks(vec![signer.jwk(None)]));
    assert!(refused(&strict, &unsecured(claims())).contains("unsecured"));
    let mut config = OAuthConfig::new(jwks(vec![signer.jwk(None)]));
    config.allow_unsecured = true;
    let lax = OAuthValidator::new(config);
    assert_eq!(
        lax.validate(&unsecured(claims()), now())
            .expect("allowed")
            .name,
        "alice"
    );
    // An alg:none header with a signature attached is still refused.
    assert!(
        lax.validate(&format!("{}c2ln", unsecured(claims())), now())
            .is_err()
    );
}

#[test]
fn time_claims_with_clock_skew() {
    let signer = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let v = validator(jwks(vec![signer.jwk(None)]));
    let token = |claims: Value| mint(&signer, json!({"alg": "ES256"}), claims);
    let with = |key: &str, value: Value| {
        let mut c = claims();
        c[key] = value;
        c
    };
    let mut no_exp = claims();
    no_exp.as_object_mut().expect("object").remove("exp");
    assert!(refused(&v, &token(no_exp)).contains("exp"));
    assert!(refused(&v, &token(with("exp", json!("soon")))).contains("exp"));
    assert!(refused(&v, &token(with("exp", json!(NOW - 31)))).contains("expired"));
    assert!(
        v.validate(&token(with("exp", json!(NOW - 29))), now())
            .is_ok(),
        "within skew"
    );
    assert!(refused(&v, &token(with("nbf", json!(NOW + 31)))).contains("nbf"));
    assert!(
        v.validate(&token(with("nbf", json!(NOW + 29))), now())
            .is_ok()
    );
    assert!(refused(&v, &token(with("iat", json!(NOW + 31)))).contains("iat"));
    assert!(
        v.validate(&token(with("exp", json!(NOW as f64 + 0.5))), now())
            .is_ok(),
        "fractional"
    );
}

#[test]
fn issuer_audience_and_principal_claim() {
    let signer = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let mut config = OAuthConfig::new(jwks(vec![signer.jwk(None)]));
    config.issuer = Some("https://idp".into());
    config.audience = Some("kafka".into());
    config.principal_claim = "preferred_username".into();
    let v = OAuthValidator::new(config);
    let token = |claims: Value| mint(&signer, json!({"alg": "ES256"}), claims);
    let base = || {
        let mut c = claims();
        c["preferred_username"] = json!("bob");
        c
    };
    assert_eq!(v.validate(&token(base()), now()).expect("ok").name, "bob");
    let mut c = base();
    c["aud"] = json!("kafka");
    assert!(v.validate(&token(c), now()).is_ok(), "aud as a string");
    for (key, value, why) in [
        ("aud", json!("other"), "audience"),
        ("aud", json!(["x", "y"]), "audience"),
        ("iss", json!("https://evil"), "issuer"),
        ("preferred_username", json!(""), "principal"),
        ("preferred_username", json!(42), "principal"),
    ] {
        let mut c = base();
        c[key] = value;
        assert!(refused(&v, &token(c)).contains(why), "{key}");
    }
    let mut c = base();
    c.as_object_mut().expect("object").remove("iss");
    assert!(refused(&v, &token(c)).contains("issuer"));
}

#[test]
fn critical_headers_are_refused() {
    let signer = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let v = validator(jwks(vec![signer.jwk(None)]));
    let token = mint(&signer, json!({"alg": "ES256", "crit": ["exp"]}), claims());
    assert!(refused(&v, &token).contains("critical"));
    let token = mint(&signer, json!({"alg": "HS256"}), claims());
    assert!(refused(&v, &token).contains("alg"));
}

#[test]
fn jwks_documents() {
    let signer = Signer::ec(&signature::ECDSA_P256_SHA256_FIXED_SIGNING);
    let doc = json!({"keys": [
        signer.jwk(Some("good")),
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AAAA"},
        {"kty": "EC", "kid": "p521", "crv": "P-521", "x": "AA", "y": "AA"},
        {"kty": "RSA", "kid": "small", "n": b(&[0xff; 128]), "e": "AQAB"},
        {"kty": "RSA", "kid": "enc", "use": "enc", "n": b(&[0xff; 256]), "e": "AQAB"},
        {"kty": "EC", "kid": "short", "crv": "P-256", "x": "AAAA", "y": "AAAA"},
    ]});
    let jwks = Jwks::from_json(doc.to_string().as_bytes()).expect("one usable key");
    assert_eq!(jwks.len(), 1);
    let skipped: Vec<&str> = jwks
        .skipped()
        .iter()
        .map(|s| s.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(skipped, ["hmac", "ed", "p521", "small", "enc", "short"]);
    for bad in [
        &br#"{"keys": []}"#[..],
        br#"{"keys": [{"kty": "oct", "k": "AA"}]}"#,
        br#"{"nokeys": 1}"#,
        b"[]",
        b"not json",
    ] {
        assert!(
            Jwks::from_json(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

fn b(bytes: &[u8]) -> String {
    b64(bytes)
}

#[test]
fn client_messages() {
    fn ok(m: &[u8]) -> Option<(Option<&str>, &str)> {
        parse_client_message(m).ok().map(|c| (c.authzid, c.token))
    }
    assert_eq!(ok(b"n,,\x01auth=Bearer abc\x01\x01"), Some((None, "abc")));
    assert_eq!(
        ok(b"n,a=alice,\x01auth=Bearer abc\x01\x01"),
        Some((Some("alice"), "abc"))
    );
    assert_eq!(
        ok(b"n,,\x01auth=bearer abc\x01traceId=42\x01\x01"),
        Some((None, "abc")),
        "extensions ignored, scheme case-insensitive"
    );
    for bad in [
        &b""[..],
        b"\x01",
        b"n,,\x01\x01",
        b"n,,\x01auth=Bearer abc\x01",
        b"n,,auth=Bearer abc\x01\x01",
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01auth=Bearer abc\x01auth=Bearer def\x01\x01",
        b"n,,\x01host=x\x01\x01",
        b"n,,\x01a-b=1\x01auth=Bearer abc\x01\x01",
        b"p=tls-unique,,\x01auth=Bearer abc\x01\x01",
        b"n,x=y,\x01auth=Bearer abc\x01\x01",
        b"n,,\x01auth=Bearer \xff\x01\x01",
    ] {
        assert!(
            parse_client_message(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
