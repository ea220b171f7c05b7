//! OAUTHBEARER (RFC 7628) with JWTs: the client's `n,,\x01auth=Bearer <jwt>\x01\x01`
//! message, the token's signature checked against a JWKS loaded from configuration (RS256,
//! RS384, RS512, PS256, PS384, PS512, ES256, ES384), `exp`/`nbf`/`iat` with a clock skew,
//! issuer and audience when configured, and the principal from a configurable claim.
//! Unsecured tokens (`alg: none`) only when [`OAuthConfig::allow_unsecured`] is set.
//!
//! The client's one message carries a GS2 header (`n,` with an optional authorization id,
//! which must then equal the token's principal) and `\x01`-separated `key=value` pairs, of
//! which `auth=Bearer <token>` is required; other keys are Kafka's SASL extensions and are
//! ignored. A message that does not follow this syntax fails at once. A well-formed
//! message whose token is refused is answered, as RFC 7628 asks, with the JSON error
//! `{"status":"invalid_token"}` as a challenge; the client acknowledges with a single
//! `\x01` and the exchange then fails.
//!
//! A token is a compact JWS: `header.payload.signature`, each base64url. The header's `alg`
//! picks the verification algorithm and `kid` the key; without a `kid` the one key that fits
//! the algorithm is used (several fitting keys and no `kid` is refused rather than tried in
//! turn). The header's `alg` must agree with the key's own `alg` when the JWKS gives one, and
//! a header naming `crit` extensions is refused since none are understood. Claims: `exp` is
//! required; `exp`, `nbf` and `iat` are compared with the clock skew allowed; `iss` and `aud`
//! (a string or an array of strings) are compared when configured; the principal claim must
//! be a non-empty string. Keys are never fetched: the JWKS comes from configuration.

use crate::credentials::Identity;
use crate::error::{AuthFailure, FailureKind, SaslError};
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// base64url, with or without padding.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Most keys a JWKS document may hold.
pub const MAX_JWKS_KEYS: usize = 256;
/// Smallest RSA modulus accepted, in bits (the smallest `ring` verifies).
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus accepted, in bits.
pub const MAX_RSA_BITS: usize = 8192;

/// The JWS algorithms accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    None,
}

impl Alg {
    fn from_name(name: &str) -> Option<Alg> {
        Some(match name {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "PS256" => Alg::Ps256,
            "PS384" => Alg::Ps384,
            "PS512" => Alg::Ps512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "none" => Alg::None,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Ps256 => "PS256",
            Alg::Ps384 => "PS384",
            Alg::Ps512 => "PS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

#[derive(Clone)]
enum KeyMaterial {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// The uncompressed point `04 || x || y`.
    Ec { curve: Curve, point: Vec<u8> },
}

#[derive(Clone)]
struct Jwk {
    kid: Option<String>,
    /// The key's own `alg`, when the JWKS names one.
    alg: Option<String>,
    material: KeyMaterial,
}

impl Jwk {
    fn fits(&self, alg: Alg) -> bool {
        if self.alg.as_deref().is_some_and(|a| a != alg.name()) {
            return false;
        }
        match (&self.material, alg) {
            (
                KeyMaterial::Rsa { .. },
                Alg::Rs256 | Alg::Rs384 | Alg::Rs512 | Alg::Ps256 | Alg::Ps384 | Alg::Ps512,
            ) => true,
            (KeyMaterial::Ec { curve, .. }, Alg::Es256) => *curve == Curve::P256,
            (KeyMaterial::Ec { curve, .. }, Alg::Es384) => *curve == Curve::P384,
            _ => false,
        }
    }

    fn verify(&self, alg: Alg, message: &[u8], sig: &[u8]) -> bool {
        match &self.material {
            KeyMaterial::Rsa { n, e } => {
                let params: &signature::RsaParameters = match alg {
                    Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Alg::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Alg::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                    Alg::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                    Alg::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            KeyMaterial::Ec { point, .. } => {
                let alg: &'static dyn signature::VerificationAlgorithm = match alg {
                    Alg::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
                    Alg::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
                    _ => return false,
                };
                UnparsedPublicKey::new(alg, point)
                    .verify(message, sig)
                    .is_ok()
            }
        }
    }
}

/// Public keys that may sign tokens, from a JWKS document (RFC 7517).
#[derive(Clone, Default)]
pub struct Jwks {
    keys: Vec<Jwk>,
    skipped: Vec<String>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field(
                "keys",
                &self
                    .keys
                    .iter()
                    .map(|k| k.kid.as_deref())
                    .collect::<Vec<_>>(),
            )
            .field("skipped", &self.skipped)
            .finish()
    }
}

fn strip_leading_zeros(bytes: &[u8]) -> Vec<u8> {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    bytes[start..].to_vec()
}

/// One JWK, or why it is not usable.
fn parse_jwk(key: &Value) -> Result<Jwk, String> {
    let field = |name: &str| key.get(name).and_then(Value::as_str);
    let decode = |name: &str| -> Result<Vec<u8>, String> {
        let value = field(name).ok_or_else(|| format!("missing {name}"))?;
        B64URL
            .decode(value)
            .map_err(|_| format!("{name} is not base64url"))
    };
    if field("use").is_some_and(|u| u != "sig") {
        return Err("not a signing key".into());
    }
    let material = match field("kty") {
        Some("RSA") => {
            let n = strip_leading_zeros(&decode("n")?);
            let e = strip_leading_zeros(&decode("e")?);
            let bits = n.len() * 8;
            if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) || e.is_empty() || e.len() > 8 {
                return Err(format!(
                    "RSA modulus of {bits} bits outside {MIN_RSA_BITS}..={MAX_RSA_BITS}"
                ));
            }
            KeyMaterial::Rsa { n, e }
        }
        Some("EC") => {
            let (curve, len) = match field("crv") {
                Some("P-256") => (Curve::P256, 32),
                Some("P-384") => (Curve::P384, 48),
                other => return Err(format!("unsupported curve {other:?}")),
            };
            let (x, y) = (decode("x")?, decode("y")?);
            if x.len() != len || y.len() != len {
                return Err("EC coordinates of the wrong length".into());
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            KeyMaterial::Ec { curve, point }
        }
        other => return Err(format!("unsupported key type {other:?}")),
    };
    let alg = field("alg").map(str::to_string);
    if let Some(a) = &alg
        && Alg::from_name(a).is_none_or(|a| a == Alg::None)
    {
        return Err(format!("unsupported alg {a:?}"));
    }
    Ok(Jwk {
        kid: field("kid").map(str::to_string),
        alg,
        material,
    })
}

impl Jwks {
    /// Parses a JWKS document. Keys of unsupported types are skipped (with their `kid` in
    /// [`Jwks::skipped`]); a document with no usable key is an error.
    pub fn from_json(json: &[u8]) -> Result<Jwks, SaslError> {
        let doc: Value = serde_json::from_slice(json)
            .map_err(|e| SaslError::InvalidJwks(format!("not JSON: {e}")))?;
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| SaslError::InvalidJwks("no \"keys\" array".into()))?;
        if keys.len() > MAX_JWKS_KEYS {
            return Err(SaslError::InvalidJwks(format!(
                "more than {MAX_JWKS_KEYS} keys"
            )));
        }
        let mut jwks = Jwks::default();
        for key in keys {
            match parse_jwk(key) {
                Ok(jwk) => jwks.keys.push(jwk),
                Err(reason) => {
                    let kid = key.get("kid").and_then(Value::as_str).unwrap_or("(no kid)");
                    jwks.skipped.push(format!("{kid}: {reason}"));
                }
            }
        }
        if jwks.keys.is_empty() {
            return Err(SaslError::InvalidJwks(format!(
                "no usable key (skipped: {})",
                jwks.skipped.join("; ")
            )));
        }
        Ok(jwks)
    }

    /// How many usable keys the document had.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the document had no usable key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys that were skipped, each as `kid: reason`.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The key for a token signed with `alg`, named by `kid` or, without one, the only key
    /// that fits.
    fn select(&self, alg: Alg, kid: Option<&str>) -> Result<&Jwk, &'static str> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid) && k.fits(alg))
                .ok_or("no key with the token's kid fits its alg"),
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.fits(alg));
                match (fitting.next(), fitting.next()) {
                    (Some(key), None) => Ok(key),
                    (None, _) => Err("no key fits the token's alg"),
                    (Some(_), Some(_)) => Err("the token has no kid and several keys fit"),
                }
            }
        }
    }
}

/// How tokens are checked.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// Keys that may sign tokens.
    pub jwks: Jwks,
    /// Required `iss`, if any.
    pub issuer: Option<String>,
    /// Required `aud` (one of the token's audiences), if any.
    pub audience: Option<String>,
    /// The claim that names the principal (`sub` by default).
    pub principal_claim: String,
    /// Accept unsigned (`alg: none`) tokens: for development only.
    pub allow_unsecured: bool,
    /// Tolerance for `exp`, `nbf` and `iat`.
    pub clock_skew: Duration,
}

impl OAuthConfig {
    /// A configuration with `jwks`, no issuer or audience check, the `sub` claim, signed
    /// tokens only and 30 s of clock skew (the gateway's defaults).
    pub fn new(jwks: Jwks) -> OAuthConfig {
        OAuthConfig {
            jwks,
            issuer: None,
            audience: None,
            principal_claim: "sub".into(),
            allow_unsecured: false,
            clock_skew: Duration::from_secs(30),
        }
    }
}

/// Checks bearer tokens against an [`OAuthConfig`].
#[derive(Debug, Clone)]
pub struct OAuthValidator {
    config: OAuthConfig,
}

fn bad_token(why: &str) -> AuthFailure {
    AuthFailure::new(
        FailureKind::BadCredentials,
        format!("OAUTHBEARER token refused: {why}"),
    )
}

/// A base64url JSON part of a token.
fn decode_json(part: &str) -> Option<Value> {
    serde_json::from_slice(&B64URL.decode(part).ok()?).ok()
}

/// A NumericDate claim in seconds since the epoch, if present; an error when present but
/// not a number.
fn numeric_date(
    claims: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<f64>, AuthFailure> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| bad_token(&format!("{name} is not a number"))),
    }
}

impl OAuthValidator {
    /// A validator for `config`.
    pub fn new(config: OAuthConfig) -> OAuthValidator {
        OAuthValidator { config }
    }

    /// The configuration.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// The identity a compact JWT proves at `now` (with `expires_at` from `exp`).
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<Identity, AuthFailure> {
        let mut parts = token.split('.');
        let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad_token("not a compact JWS"));
        };
        let header = decode_json(header_b64).ok_or_else(|| bad_token("unreadable header"))?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .and_then(Alg::from_name)
            .ok_or_else(|| bad_token("unsupported alg"))?;
        if header.get("crit").is_some() {
            return Err(bad_token("critical header extensions are not supported"));
        }
        let signature = B64URL
            .decode(signature_b64)
            .map_err(|_| bad_token("unreadable signature"))?;
        let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
        if alg == Alg::None {
            if !self.config.allow_unsecured || !signature.is_empty() {
                return Err(bad_token("unsecured tokens are not accepted"));
            }
        } else {
            let kid = header.get("kid").and_then(Value::as_str);
            let key = self.config.jwks.select(alg, kid).map_err(bad_token)?;
            if !key.verify(alg, signed, &signature) {
                return Err(bad_token("signature does not verify"));
            }
        }
        let payload = decode_json(payload_b64).ok_or_else(|| bad_token("unreadable claims"))?;
        let claims = payload
            .as_object()
            .ok_or_else(|| bad_token("claims are not an object"))?;
        self.check_claims(claims, now)
    }

    fn check_claims(
        &self,
        claims: &serde_json::Map<String, Value>,
        now: SystemTime,
    ) -> Result<Identity, AuthFailure> {
        let now_secs = match now.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        let skew = self.config.clock_skew.as_secs_f64();
        let exp = numeric_date(claims, "exp")?.ok_or_else(|| bad_token("no exp claim"))?;
        if now_secs > exp + skew {
            return Err(bad_token("expired"));
        }
        if numeric_date(claims, "nbf")?.is_some_and(|nbf| now_secs + skew < nbf) {
            return Err(bad_token("not valid yet (nbf)"));
        }
        if numeric_date(claims, "iat")?.is_some_and(|iat| now_secs + skew < iat) {
            return Err(bad_token("issued in the future (iat)"));
        }
        if let Some(issuer) = &self.config.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return Err(bad_token("wrong issuer"));
        }
        if let Some(audience) = &self.config.audience {
            let matches = match claims.get("aud") {
                Some(Value::String(a)) => a == audience,
                Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(audience)),
                _ => false,
            };
            if !matches {
                return Err(bad_token("wrong audience"));
            }
        }
        let principal = claims
            .get(&self.config.principal_claim)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| bad_token("no principal claim"))?;
        let expires_at = if exp <= 0.0 {
            UNIX_EPOCH
        } else {
            // Saturate far-future dates rather than overflow.
            UNIX_EPOCH
                .checked_add(Duration::try_from_secs_f64(exp).unwrap_or(Duration::MAX))
                .unwrap_or_else(|| UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 64))
        };
        Ok(Identity {
            name: principal.to_string(),
            expires_at: Some(expires_at),
        })
    }
}

/// The separator of OAUTHBEARER's key/value pairs (and the client's acknowledgement).
pub(crate) const KVSEP: u8 = 0x01;

/// The challenge sent when a token is refused (RFC 7628's error document).
pub const INVALID_TOKEN_CHALLENGE: &[u8] = br#"{"status":"invalid_token"}"#;

/// Why a client message was not accepted.
pub(crate) enum Refusal {
    /// Send this error document and fail after the client's acknowledgement.
    Challenge(Vec<u8>, AuthFailure),
    /// Fail now.
    Fail(AuthFailure),
}

fn malformed(message: &str) -> Refusal {
    Refusal::Fail(AuthFailure::new(FailureKind::Malformed, message))
}

/// The parts of a client message the server uses.
struct ClientMessage<'a> {
    authzid: Option<&'a str>,
    token: &'a str,
}

fn parse_client_message(message: &[u8]) -> Result<ClientMessage<'_>, Refusal> {
    let text =
        std::str::from_utf8(message).map_err(|_| malformed("OAUTHBEARER: message is not UTF-8"))?;
    let rest = if let Some(r) = text.strip_prefix("n,").or_else(|| text.strip_prefix("y,")) {
        r
    } else if text.starts_with("p=") {
        return Err(malformed("OAUTHBEARER: channel binding is not supported"));
    } else {
        return Err(malformed("OAUTHBEARER: invalid GS2 header"));
    };
    let (authzid, pairs) = rest
        .split_once(',')
        .ok_or_else(|| malformed("OAUTHBEARER: invalid GS2 header"))?;
    let authzid = match authzid {
        "" => None,
        a => Some(
            a.strip_prefix("a=")
                .filter(|a| !a.is_empty() && !a.contains('='))
                .ok_or_else(|| malformed("OAUTHBEARER: invalid authorization id"))?,
        ),
    };
    let pairs = pairs
        .strip_prefix('\u{1}')
        .and_then(|p| p.strip_suffix("\u{1}\u{1}"))
        .ok_or_else(|| malformed("OAUTHBEARER: invalid key/value list"))?;
    let mut token = None;
    let mut seen: Vec<&str> = Vec::new();
    for pair in pairs.split('\u{1}') {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| malformed("OAUTHBEARER: invalid key/value pair"))?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(malformed("OAUTHBEARER: invalid key"));
        }
        if !value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) || matches!(b, b'\t' | b'\r' | b'\n'))
        {
            return Err(malformed("OAUTHBEARER: invalid value"));
        }
        if seen.contains(&key) {
            return Err(malformed("OAUTHBEARER: repeated key"));
        }
        seen.push(key);
        if key == "auth" {
            let (scheme, credentials) = value
                .split_once(' ')
                .ok_or_else(|| malformed("OAUTHBEARER: invalid auth value"))?;
            if !scheme.eq_ignore_ascii_case("bearer") {
                return Err(malformed("OAUTHBEARER: the auth scheme must be Bearer"));
            }
            token = Some(credentials.trim());
        }
    }
    let token = token.ok_or_else(|| malformed("OAUTHBEARER: no auth=Bearer token"))?;
    Ok(ClientMessage { authzid, token })
}

/// Handles the client's message.
pub(crate) fn server_step(
    validator: &OAuthValidator,
    message: &[u8],
    now: SystemTime,
) -> Result<Identity, Refusal> {
    let message = parse_client_message(message)?;
    let identity = validator
        .validate(message.token, now)
        .map_err(|failure| Refusal::Challenge(INVALID_TOKEN_CHALLENGE.to_vec(), failure))?;
    if message.authzid.is_some_and(|a| a != identity.name) {
        return Err(Refusal::Fail(AuthFailure::new(
            FailureKind::BadCredentials,
            "OAUTHBEARER: the authorization id must equal the token's principal",
        )));
    }
    Ok(identity)
}

#[cfg(test)]
mod tests;
