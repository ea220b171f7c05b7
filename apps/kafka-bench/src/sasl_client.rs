//! The client side of SASL PLAIN and SCRAM-SHA-256/512, as far as the `auth` scenario needs
//! it: the messages a Kafka client sends and the checks it makes of the server's answers.
//!
//! Sans-IO: [`ScramClient`] turns the server's messages into the next client message and
//! verifies the server's signature at the end; the caller moves the bytes. A SCRAM login
//! costs the client one PBKDF2 of the password with the server's salt and iteration count.
//! The server does not pay that per login (it keeps the derived keys), so a benchmark
//! whose client runs PBKDF2 every time mostly measures the client. [`SaltCache`] keeps the
//! salted password per salt and iteration count to avoid that; `--no-salt-cache` turns it
//! off.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::cli::SaslMechanism;

/// Most PBKDF2 iterations the client accepts from a server (Kafka's own upper bound is
/// 16384): a hostile or broken server cannot make a worker spin for minutes.
pub const MAX_ITERATIONS: u32 = 100_000;

/// The PLAIN message: no authorization identity, the username and the password.
pub fn plain_message(username: &str, password: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(2 + username.len() + password.len());
    m.push(0);
    m.extend_from_slice(username.as_bytes());
    m.push(0);
    m.extend_from_slice(password.as_bytes());
    m
}

/// Which hash a SCRAM mechanism uses: the gateway's own type, whose arithmetic (salted
/// password, proof, server signature) the client shares.
pub type ScramHash = kafka_sasl::ScramMechanism;

/// The SCRAM hash of `mechanism`, `None` for PLAIN.
pub fn scram_hash(mechanism: SaslMechanism) -> Option<ScramHash> {
    match mechanism {
        SaslMechanism::Plain => None,
        SaslMechanism::ScramSha256 => Some(ScramHash::Sha256),
        SaslMechanism::ScramSha512 => Some(ScramHash::Sha512),
    }
}

/// Salted passwords by (hash, salt, iterations), shared by the workers of one run (they
/// all log in as the same user). Bounded: a server that hands out a fresh salt for every
/// login (as one does for unknown users) fills it once and later entries are not kept.
#[derive(Debug, Default)]
pub struct SaltCache {
    entries: Mutex<HashMap<SaltKey, Vec<u8>>>,
}

/// What a salted password depends on besides the password: hash, salt and iterations.
type SaltKey = (ScramHash, Vec<u8>, u32);

/// Entries a [`SaltCache`] keeps at most.
const SALT_CACHE_ENTRIES: usize = 64;

impl SaltCache {
    fn get(&self, key: &SaltKey) -> Option<Vec<u8>> {
        self.entries.lock().ok()?.get(key).cloned()
    }

    fn put(&self, key: SaltKey, value: Vec<u8>) {
        if let Ok(mut m) = self.entries.lock()
            && m.len() < SALT_CACHE_ENTRIES
        {
            m.insert(key, value);
        }
    }
}

/// One SCRAM login in progress.
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    expected_server_signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// `=` and `,` escaped as SCRAM wants them in a username.
fn escape_username(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

impl ScramClient {
    /// A login for `username` with `client_nonce` (printable, no comma).
    pub fn new(hash: ScramHash, username: &str, password: &str, client_nonce: &str) -> Self {
        let client_first_bare = format!("n={},r={client_nonce}", escape_username(username));
        ScramClient {
            hash,
            password: password.to_string(),
            client_nonce: client_nonce.to_string(),
            client_first_bare,
            expected_server_signature: None,
        }
    }

    /// A fresh random nonce: 18 random bytes in base64.
    pub fn random_nonce() -> Result<String, String> {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 18];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| "no random bytes for the SCRAM nonce".to_string())?;
        Ok(B64.encode(bytes))
    }

    /// The client-first message (no channel binding, no authorization identity).
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Takes the server-first message and returns the client-final message with the proof.
    pub fn client_final(
        &mut self,
        server_first: &[u8],
        cache: Option<&SaltCache>,
    ) -> Result<Vec<u8>, String> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| "server-first is not UTF-8")?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in server_first.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("e", v)) => return Err(format!("server refused: {v}")),
                Some(("m", _)) => return Err("server asks for an unknown extension".into()),
                _ => {}
            }
        }
        let nonce = nonce.ok_or("server-first without a nonce")?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("server nonce does not extend the client's".into());
        }
        let salt = B64
            .decode(salt.ok_or("server-first without a salt")?)
            .map_err(|_| "salt is not base64")?;
        let iterations: u32 = iterations
            .ok_or("server-first without an iteration count")?
            .parse()
            .map_err(|_| "iteration count is not a number")?;
        if iterations > MAX_ITERATIONS {
            return Err(format!("server asks for {iterations} iterations"));
        }
        if iterations == 0 {
            return Err("zero iterations".into());
        }

        let key = (self.hash, salt, iterations);
        let salted = match cache.and_then(|c| c.get(&key)) {
            Some(s) => s,
            None => {
                let out = self
                    .hash
                    .salted_password(self.password.as_bytes(), &key.1, iterations);
                if let Some(c) = cache {
                    c.put(key, out.clone());
                }
                out
            }
        };

        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let computed = self.hash.client_proof(&salted, auth_message.as_bytes());
        self.expected_server_signature = Some(computed.server_signature);
        let proof = computed.proof;
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proves it knows the server key.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let expected = self
            .expected_server_signature
            .as_ref()
            .ok_or("server-final before server-first")?;
        let text = std::str::from_utf8(server_final).map_err(|_| "server-final is not UTF-8")?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("server refused: {e}"));
        }
        let v = text
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or("server-final without a signature")?;
        let got = B64
            .decode(v)
            .map_err(|_| "server signature is not base64")?;
        if &got != expected {
            return Err("wrong server signature".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    // The SCRAM-SHA-256 example exchange of RFC 7677, section 3.
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    #[test]
    fn rfc7677_exchange() {
        let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", NONCE);
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let fin = c.client_final(SERVER_FIRST.as_bytes(), None).unwrap();
        assert_eq!(String::from_utf8(fin).unwrap(), CLIENT_FINAL);
        c.verify_server_final(SERVER_FINAL.as_bytes()).unwrap();
    }

    #[test]
    fn cached_salted_password_gives_the_same_proof() {
        let cache = SaltCache::default();
        for _ in 0..2 {
            let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", NONCE);
            let fin = c
                .client_final(SERVER_FIRST.as_bytes(), Some(&cache))
                .unwrap();
            assert_eq!(String::from_utf8(fin).unwrap(), CLIENT_FINAL);
        }
        assert_eq!(cache.entries.lock().unwrap().len(), 1);
    }

    #[test]
    fn wrong_password_or_forged_server_is_caught() {
        let mut c = ScramClient::new(ScramHash::Sha256, "user", "pen", NONCE);
        let fin = c.client_final(SERVER_FIRST.as_bytes(), None).unwrap();
        assert_ne!(String::from_utf8(fin).unwrap(), CLIENT_FINAL);
        assert!(c.verify_server_final(SERVER_FINAL.as_bytes()).is_err());
    }

    #[test]
    fn hostile_server_first_is_refused() {
        let cases = [
            "r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0",
            "r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096",
            "e=unknown-user",
        ];
        for case in cases {
            let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", NONCE);
            assert!(c.client_final(case.as_bytes(), None).is_err(), "{case}");
        }
    }

    #[test]
    fn sha512_proof_has_the_hash_length() {
        let mut c = ScramClient::new(ScramHash::Sha512, "a=b,c", "pw", NONCE);
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=rOprNGfwEbeRWgbNEkqO");
        let fin = c.client_final(SERVER_FIRST.as_bytes(), None).unwrap();
        let fin = String::from_utf8(fin).unwrap();
        let proof = B64.decode(fin.rsplit_once(",p=").unwrap().1).unwrap();
        assert_eq!(proof.len(), 64);
    }

    #[test]
    fn plain_layout() {
        assert_eq!(plain_message("alice", "pw"), b"\0alice\0pw");
    }
}
