//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka speaks
//! them: no channel binding (`n,,` only), the `tokenauth` extension refused, usernames
//! with `=2C`/`=3D` escapes.
//!
//! A [`ScramCredential`] is what the server keeps: salt, iterations, stored key and server
//! key. It cannot be used to log in, and it is what Kafka's AlterUserScramCredentials
//! delivers (as a salted password, from which the keys are derived here).
//!
//! How the server side runs: the client-first message names the user and a client nonce
//! after a GS2 header (`n,,` or `y,,`, optionally with an authorization id equal to the
//! user; `p=` asks for channel binding, which Kafka does not do, and is refused). The server
//! answers with the nonce extended by 32 random bytes (in URL-safe base64: letters, digits,
//! `-` and `_`, which every client's parser accepts), the credential's salt and iteration
//! count. The client-final message must repeat the GS2 header (`c=`) and the whole
//! nonce, and carries the proof: the client key XORed with an HMAC of the conversation keyed
//! by the stored key. The server recovers the client key, hashes it and compares the result
//! with the stored key in constant time; on success it sends its own signature (`v=`),
//! which proves to the client that the server holds the server key. The server never runs
//! PBKDF2 during a login: that cost is the client's.
//!
//! A user without a credential still gets a challenge: a salt and iteration count derived
//! from the name with a per-process key, the same at every attempt, so the challenge does
//! not reveal whether the user exists. The exchange then fails exactly as a wrong password.
//! Extensions in the client-first message are refused: Kafka's only one, `tokenauth=true`,
//! asks for delegation-token authentication, which the gateway does not offer.

use crate::credentials::Identity;
use crate::error::{AuthFailure, FailureKind, SaslError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use std::fmt;
use subtle::ConstantTimeEq as _;

/// The hash behind a SCRAM mechanism, with Kafka's numeric id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (Kafka id 1).
    Sha256,
    /// SCRAM-SHA-512 (Kafka id 2).
    Sha512,
}

impl ScramMechanism {
    /// Kafka's id in Describe/AlterUserScramCredentials (`0` is unknown).
    pub fn id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism with Kafka's id `id`.
    pub fn from_id(id: i8) -> Option<ScramMechanism> {
        match id {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The hash's output length in bytes (32 or 64).
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

/// Allowed iteration counts, for credentials set through AlterUserScramCredentials and
/// read from stores. Kafka's own bounds are 4096..=16384.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramBounds {
    /// Fewest iterations accepted.
    pub min_iterations: u32,
    /// Most iterations accepted.
    pub max_iterations: u32,
}

impl Default for ScramBounds {
    fn default() -> Self {
        ScramBounds {
            min_iterations: 4096,
            max_iterations: 16384,
        }
    }
}

/// What the server keeps of a SCRAM password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The hash.
    pub mechanism: ScramMechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Fewest salt bytes a credential may have.
pub const MIN_SALT_BYTES: usize = 8;
/// Most salt bytes a credential may have.
pub const MAX_SALT_BYTES: usize = 1024;
/// The iteration ceiling of [`ScramCredential::from_password`] (the configured bounds apply
/// to credentials clients set).
pub const MAX_PASSWORD_ITERATIONS: u32 = 1_000_000;
/// Bytes of random salt [`ScramCredential::from_password`] draws.
pub const GENERATED_SALT_BYTES: usize = 32;

impl ScramMechanism {
    pub(crate) fn hmac_algorithm(self) -> ring::hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => ring::hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => ring::hmac::HMAC_SHA512,
        }
    }

    pub(crate) fn digest_algorithm(self) -> &'static ring::digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &ring::digest::SHA256,
            ScramMechanism::Sha512 => &ring::digest::SHA512,
        }
    }

    pub(crate) fn pbkdf2_algorithm(self) -> ring::pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// `HMAC(key, data)`.
    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let key = ring::hmac::Key::new(self.hmac_algorithm(), key);
        ring::hmac::sign(&key, data).as_ref().to_vec()
    }

    /// `H(data)`.
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        ring::digest::digest(self.digest_algorithm(), data)
            .as_ref()
            .to_vec()
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this hash, one block.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        let iterations = std::num::NonZeroU32::new(iterations).unwrap_or(std::num::NonZeroU32::MIN);
        ring::pbkdf2::derive(
            self.pbkdf2_algorithm(),
            iterations,
            salt,
            password,
            &mut out,
        );
        out
    }
}

/// The client's arithmetic for its final message: the proof it sends, and the signature the
/// server must answer with.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientProof {
    /// `ClientKey XOR HMAC(StoredKey, AuthMessage)`.
    pub proof: Vec<u8>,
    /// `HMAC(ServerKey, AuthMessage)`, which the server's `v=` must carry.
    pub server_signature: Vec<u8>,
}

impl fmt::Debug for ClientProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientProof").finish_non_exhaustive()
    }
}

impl ScramMechanism {
    /// The client side of an exchange (tools and tests that log in): the proof for
    /// `auth_message` (`client-first-bare,server-first,client-final-without-proof`) from
    /// the salted password, and the server signature to expect.
    pub fn client_proof(self, salted_password: &[u8], auth_message: &[u8]) -> ClientProof {
        let client_key = self.hmac(salted_password, b"Client Key");
        let signature = self.hmac(&self.hash(&client_key), auth_message);
        let server_key = self.hmac(salted_password, b"Server Key");
        ClientProof {
            proof: client_key
                .iter()
                .zip(&signature)
                .map(|(k, s)| k ^ s)
                .collect(),
            server_signature: self.hmac(&server_key, auth_message),
        }
    }
}

impl ScramCredential {
    /// The credential for a salted password (`Hi(password, salt, iterations)`), as
    /// AlterUserScramCredentials sends it. Checks the lengths and `bounds`.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        iterations: u32,
        salted_password: &[u8],
        bounds: &ScramBounds,
    ) -> Result<ScramCredential, SaslError> {
        if iterations < bounds.min_iterations || iterations > bounds.max_iterations {
            return Err(SaslError::Invalid(format!(
                "{} iterations {iterations} outside {}..={}",
                mechanism.name(),
                bounds.min_iterations,
                bounds.max_iterations
            )));
        }
        check_salt(salt)?;
        if salted_password.len() != mechanism.hash_len() {
            return Err(SaslError::Invalid(format!(
                "{} salted password must be {} bytes, got {}",
                mechanism.name(),
                mechanism.hash_len(),
                salted_password.len()
            )));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        })
    }

    /// A credential for `password` with a fresh random salt. `iterations` must be at least
    /// 4096 (RFC 7677's floor) and at most [`MAX_PASSWORD_ITERATIONS`].
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        let mut salt = [0u8; GENERATED_SALT_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| SaslError::Invalid("no random salt: the system RNG failed".into()))?;
        ScramCredential::from_password_and_salt(mechanism, password, &salt, iterations)
    }

    /// A credential for `password` with the given salt (tests and tools that need a
    /// reproducible credential).
    pub fn from_password_and_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        let bounds = ScramBounds {
            min_iterations: ScramBounds::default().min_iterations,
            max_iterations: MAX_PASSWORD_ITERATIONS,
        };
        if iterations < bounds.min_iterations || iterations > bounds.max_iterations {
            return Err(SaslError::Invalid(format!(
                "iterations {iterations} outside {}..={}",
                bounds.min_iterations, bounds.max_iterations
            )));
        }
        check_salt(salt)?;
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        ScramCredential::from_salted_password(mechanism, salt, iterations, &salted, &bounds)
    }

    /// Whether the lengths fit the mechanism and the salt its bounds (a credential read
    /// from a store is checked before use).
    pub fn is_well_formed(&self) -> bool {
        self.stored_key.len() == self.mechanism.hash_len()
            && self.server_key.len() == self.mechanism.hash_len()
            && check_salt(&self.salt).is_ok()
            && self.iterations > 0
    }
}

fn check_salt(salt: &[u8]) -> Result<(), SaslError> {
    if salt.len() < MIN_SALT_BYTES || salt.len() > MAX_SALT_BYTES {
        return Err(SaslError::Invalid(format!(
            "salt must be {MIN_SALT_BYTES}..={MAX_SALT_BYTES} bytes, got {}",
            salt.len()
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The server side of an exchange.
// ---------------------------------------------------------------------------------------

/// Longest SCRAM username accepted after unescaping, in bytes.
pub const MAX_USERNAME_BYTES: usize = 255;
/// Longest client nonce accepted, in bytes.
pub const MAX_CLIENT_NONCE_BYTES: usize = 512;
/// Random bytes in the server's part of the nonce (base64-encoded in the message).
pub const SERVER_NONCE_BYTES: usize = 32;
/// Salt bytes of the stand-in credential of an unknown user: those of a credential the
/// gateway makes ([`GENERATED_SALT_BYTES`]).
const FAKE_SALT_BYTES: usize = GENERATED_SALT_BYTES;

/// PBKDF2 iterations of the credentials the gateway's `users set-scram` command makes by
/// default, and of the stand-in credential of an unknown user (within the bounds), so
/// that a challenge does not tell a made-up user from a real one made the usual way.
pub const DEFAULT_ITERATIONS: u32 = 8192;

/// The state kept between the server-first and the client-final message.
#[derive(Clone)]
pub(crate) struct Pending {
    user: String,
    /// False for an unknown user: the exchange runs on a stand-in credential and fails.
    known: bool,
    credential: ScramCredential,
    /// `base64(gs2-header)`, which the client-final `c=` must repeat.
    channel_binding: String,
    /// Client nonce followed by server nonce.
    nonce: String,
    /// Bytes of `nonce` that are the client's.
    client_nonce_len: usize,
    /// `client-first-bare "," server-first`: the start of the AuthMessage.
    auth_prefix: String,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("mechanism", &self.credential.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

fn malformed(message: impl Into<String>) -> AuthFailure {
    AuthFailure::new(FailureKind::Malformed, message)
}

fn invalid_credentials(mechanism: ScramMechanism) -> AuthFailure {
    AuthFailure {
        kind: FailureKind::BadCredentials,
        message: format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
            mechanism.name()
        ),
        final_message: Some(b"e=invalid-proof".to_vec()),
    }
}

/// Undoes the `=2C` / `=3D` escapes of a SCRAM username; any other `=` is an error.
pub fn unescape_username(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Escapes `,` and `=` in a username the way SCRAM messages carry it.
pub fn escape_username(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_CLIENT_NONCE_BYTES
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// A parsed client-first message.
struct ClientFirst<'a> {
    gs2_header: &'a str,
    bare: &'a str,
    user: String,
    nonce: &'a str,
}

fn parse_client_first(token: &[u8]) -> Result<ClientFirst<'_>, AuthFailure> {
    let text = std::str::from_utf8(token).map_err(|_| malformed("SCRAM: message is not UTF-8"))?;
    let rest = if let Some(r) = text.strip_prefix("n,").or_else(|| text.strip_prefix("y,")) {
        r
    } else if text.starts_with("p=") {
        return Err(malformed("SCRAM: channel binding is not supported"));
    } else {
        return Err(malformed("SCRAM: invalid client-first message"));
    };
    let comma = rest
        .find(',')
        .ok_or_else(|| malformed("SCRAM: invalid client-first message"))?;
    let authzid = &rest[..comma];
    let bare = &rest[comma + 1..];
    let gs2_header = &text[..text.len() - bare.len()];
    let authzid = if authzid.is_empty() {
        None
    } else {
        let name = authzid
            .strip_prefix("a=")
            .ok_or_else(|| malformed("SCRAM: invalid authorization id"))?;
        Some(unescape_username(name).ok_or_else(|| malformed("SCRAM: invalid authorization id"))?)
    };

    let mut attributes = bare.split(',');
    let user = match attributes.next() {
        Some(a) if a.starts_with("m=") => {
            return Err(malformed("SCRAM: mandatory extensions are not supported"));
        }
        Some(a) => a
            .strip_prefix("n=")
            .ok_or_else(|| malformed("SCRAM: expected the username"))?,
        None => return Err(malformed("SCRAM: expected the username")),
    };
    let user = unescape_username(user).ok_or_else(|| malformed("SCRAM: invalid username"))?;
    if user.is_empty() || user.len() > MAX_USERNAME_BYTES {
        return Err(malformed("SCRAM: invalid username length"));
    }
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or_else(|| malformed("SCRAM: expected the client nonce"))?;
    if !valid_nonce(nonce) {
        return Err(malformed("SCRAM: invalid client nonce"));
    }
    if let Some(extension) = attributes.next() {
        return Err(if extension == "tokenauth=true" {
            AuthFailure::new(
                FailureKind::BadCredentials,
                "SCRAM: delegation token authentication is not supported",
            )
        } else {
            malformed("SCRAM: unsupported extension")
        });
    }
    if authzid.is_some_and(|a| a != user) {
        return Err(AuthFailure::new(
            FailureKind::BadCredentials,
            "SCRAM: the authorization id must be absent or equal the username",
        ));
    }
    Ok(ClientFirst {
        gs2_header,
        bare,
        user,
        nonce,
    })
}

/// The stand-in credential of an unknown user: derived from the name with the process
/// secret, so it is the same at every attempt and unlike any other user's.
fn fake_credential(
    mechanism: ScramMechanism,
    secret: &[u8],
    user: &str,
    bounds: &ScramBounds,
) -> ScramCredential {
    let derive = |label: &str| {
        let mut data = Vec::with_capacity(label.len() + user.len() + 16);
        data.extend_from_slice(label.as_bytes());
        data.push(0);
        data.extend_from_slice(mechanism.name().as_bytes());
        data.push(0);
        data.extend_from_slice(user.as_bytes());
        mechanism.hmac(secret, &data)
    };
    let mut salt = derive("salt");
    salt.truncate(FAKE_SALT_BYTES);
    ScramCredential {
        mechanism,
        salt,
        iterations: DEFAULT_ITERATIONS.clamp(
            bounds.min_iterations,
            bounds.max_iterations.max(bounds.min_iterations),
        ),
        stored_key: derive("stored"),
        server_key: derive("server"),
    }
}

/// Handles the client-first message: returns the pending state and the server-first
/// message.
pub(crate) async fn server_first(
    mechanism: ScramMechanism,
    store: &dyn crate::credentials::ScramCredentialStore,
    bounds: &ScramBounds,
    secret: &[u8],
    token: &[u8],
) -> Result<(Pending, Vec<u8>), AuthFailure> {
    let mut server_nonce = [0u8; SERVER_NONCE_BYTES];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut server_nonce).map_err(
        |_| AuthFailure::new(FailureKind::Unavailable, "SCRAM: no random nonce available"),
    )?;
    server_first_with_nonce(
        mechanism,
        store,
        bounds,
        secret,
        token,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(server_nonce),
    )
    .await
}

/// [`server_first`] with a given server nonce (the RFC test vectors fix it).
pub(crate) async fn server_first_with_nonce(
    mechanism: ScramMechanism,
    store: &dyn crate::credentials::ScramCredentialStore,
    bounds: &ScramBounds,
    secret: &[u8],
    token: &[u8],
    server_nonce: &str,
) -> Result<(Pending, Vec<u8>), AuthFailure> {
    let first = parse_client_first(token)?;
    let stored = store
        .credential(&first.user, mechanism)
        .await
        .map_err(|_| {
            AuthFailure::new(
                FailureKind::Unavailable,
                "SCRAM: the credential store could not be read",
            )
        })?;
    let usable = stored.filter(|c| {
        c.mechanism == mechanism
            && c.is_well_formed()
            && c.iterations >= bounds.min_iterations
            && c.iterations <= bounds.max_iterations
    });
    let (known, credential) = match usable {
        Some(c) => (true, c),
        None => (
            false,
            fake_credential(mechanism, secret, &first.user, bounds),
        ),
    };
    let nonce = format!("{}{server_nonce}", first.nonce);
    let server_first = format!(
        "r={nonce},s={},i={}",
        B64.encode(&credential.salt),
        credential.iterations
    );
    let pending = Pending {
        user: first.user,
        known,
        credential,
        channel_binding: B64.encode(first.gs2_header),
        client_nonce_len: first.nonce.len(),
        nonce,
        auth_prefix: format!("{},{server_first}", first.bare),
    };
    Ok((pending, server_first.into_bytes()))
}

impl Pending {
    /// Whether the client-final nonce is the one this exchange issued. librdkafka before
    /// 2.6.1 (librdkafka#4895) sends its own nonce once more in front of it; Kafka has
    /// accepted that since 3.8.1 (a nonce that ends with the issued one), and so do we, but
    /// only with exactly the client's nonce in front: the server's part is still required,
    /// which is what defeats a replay.
    fn nonce_matches(&self, nonce: &str) -> bool {
        let issued = self.nonce.as_bytes();
        let got = nonce.as_bytes();
        if got.len() == issued.len() {
            return bool::from(got.ct_eq(issued));
        }
        let client = &issued[..self.client_nonce_len.min(issued.len())];
        got.len() == client.len() + issued.len()
            && bool::from(got[..client.len()].ct_eq(client) & got[client.len()..].ct_eq(issued))
    }

    /// Handles the client-final message: the identity and the server-final message, or the
    /// failure.
    pub(crate) fn verify_final(&self, token: &[u8]) -> Result<(Identity, Vec<u8>), AuthFailure> {
        let mechanism = self.credential.mechanism;
        let text =
            std::str::from_utf8(token).map_err(|_| malformed("SCRAM: message is not UTF-8"))?;
        let proof_at = text
            .rfind(",p=")
            .ok_or_else(|| malformed("SCRAM: expected the client proof"))?;
        let without_proof = &text[..proof_at];
        let proof = &text[proof_at + 3..];
        let mut attributes = without_proof.split(',');
        let channel_binding = attributes
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or_else(|| malformed("SCRAM: expected the channel binding"))?;
        let nonce = attributes
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or_else(|| malformed("SCRAM: expected the nonce"))?;
        if attributes.any(|a| a.len() < 2 || a.as_bytes()[1] != b'=') {
            return Err(malformed("SCRAM: invalid client-final message"));
        }
        if channel_binding != self.channel_binding {
            return Err(malformed("SCRAM: channel binding data does not match"));
        }
        if !self.nonce_matches(nonce) {
            return Err(malformed("SCRAM: nonce does not match"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| malformed("SCRAM: invalid client proof"))?;
        if proof.len() != mechanism.hash_len() {
            return Err(malformed("SCRAM: invalid client proof"));
        }
        let auth_message = format!("{},{without_proof}", self.auth_prefix);
        let signature = mechanism.hmac(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let computed = mechanism.hash(&client_key);
        let proof_ok = computed.as_slice().ct_eq(&self.credential.stored_key);
        if !bool::from(proof_ok & subtle::Choice::from(u8::from(self.known))) {
            return Err(invalid_credentials(mechanism));
        }
        let server_signature = mechanism.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            Identity {
                name: self.user.clone(),
                expires_at: None,
            },
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}
