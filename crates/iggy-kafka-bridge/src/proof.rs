//! Proof that a gateway wrote a record of the meta stream.
//!
//! The meta stream holds what grants and routes: SCRAM credentials, ACL bindings, topic
//! settings, membership heartbeats (which advertise where clients connect), committed
//! offsets and coordinator states. Iggy lets any user with a `send_messages` grant on
//! the stream (a global grant included) append to it, so a record's presence there says
//! nothing about who wrote it. With a meta secret configured, every record a gateway
//! writes carries a user header [`PROOF_HEADER`]:
//!
//! ```text
//! version (1 byte, 1) | signed at, Unix ms (8 bytes, big-endian) | HMAC-SHA256 tag (32 bytes)
//! tag = HMAC(secret, "iggy-kafka-meta/1" 0 stream 0 log 0 signed-at payload)
//! ```
//!
//! `log` is the log's base name (`topics`, `scram`, `acls`, `groups.3`, `members`), so
//! a record proven for one log does not pass in another, and a snapshot (which writes
//! the live records anew) signs them again. A reader refuses a record without a valid
//! tag under the current or the previous secret (rotation), and a record whose
//! signed-at time lies more than `meta_max_skew` from the time Iggy appended it: a
//! genuine record copied and appended again later (a replay) is refused once that
//! window has passed. Iggy stamps a message's timestamp when it appends it; the writer
//! cannot choose it.
//!
//! Records appended before `meta_unsigned_before` (by Iggy's clock) are taken without a
//! proof: the way to turn proofs on over a meta stream written without them. After the
//! logs have rolled to a new generation (their snapshots are signed) the setting can go.
//!
//! Without a secret nothing is signed or checked (the behaviour of a gateway without
//! authentication, where every client may do everything anyway).

use iggy::prelude::{HeaderKey, HeaderKind, HeaderValue, IggyMessage};
use kafka_store::{StoreError, StoreResult};
use ring::hmac;
use std::collections::BTreeMap;
use std::fmt;

/// The user header that carries a record's proof.
pub const PROOF_HEADER: &str = "kafka.meta.proof";

/// Bytes of a proof: version, signed-at time, tag.
pub const PROOF_LEN: usize = 1 + 8 + 32;

/// The proof format written.
const VERSION: u8 = 1;

/// Domain separation: nothing else this key might ever sign starts so.
const CONTEXT: &[u8] = b"iggy-kafka-meta/1";

/// The shortest secret taken (bytes).
pub const MIN_SECRET_BYTES: usize = 32;

/// What a reader concluded about one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Proven, or no proof is asked for (no secret), or appended before
    /// `meta_unsigned_before`.
    Accepted,
    /// No proof where one is required.
    Unsigned,
    /// A proof that does not verify under any configured secret (forged, or a key the
    /// gateways no longer hold).
    Forged,
    /// A valid proof, signed too far from when Iggy appended the record (a replay, or
    /// clocks apart by more than `meta_max_skew`).
    Stale,
}

impl Verdict {
    /// The `reason` label of the refused-records metric.
    pub fn reason(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Unsigned => "unsigned",
            Verdict::Forged => "forged",
            Verdict::Stale => "stale",
        }
    }
}

/// Signs and checks meta records (see the module docs).
#[derive(Clone)]
pub struct MetaProof {
    stream: String,
    /// Signs, and is tried first.
    current: Option<hmac::Key>,
    /// Checks only.
    previous: Option<hmac::Key>,
    max_skew_ms: u64,
    unsigned_before_ms: Option<u64>,
}

impl fmt::Debug for MetaProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaProof")
            .field("stream", &self.stream)
            .field("signs", &self.current.is_some())
            .field("previous", &self.previous.is_some())
            .field("max_skew_ms", &self.max_skew_ms)
            .field("unsigned_before_ms", &self.unsigned_before_ms)
            .finish()
    }
}

impl MetaProof {
    /// Proofs for the meta stream `stream`. Without `current` nothing is signed or
    /// checked; `previous` alone is ignored.
    pub fn new(
        stream: &str,
        current: Option<&str>,
        previous: Option<&str>,
        max_skew_ms: u64,
        unsigned_before_ms: Option<u64>,
    ) -> MetaProof {
        let key = |s: &str| hmac::Key::new(hmac::HMAC_SHA256, s.as_bytes());
        let current = current.map(key);
        MetaProof {
            stream: stream.to_owned(),
            previous: previous.filter(|_| current.is_some()).map(key),
            current,
            max_skew_ms,
            unsigned_before_ms,
        }
    }

    /// No secret: records are neither signed nor checked.
    pub fn off(stream: &str) -> MetaProof {
        MetaProof::new(stream, None, None, 0, None)
    }

    /// Whether records are signed and checked.
    pub fn enabled(&self) -> bool {
        self.current.is_some()
    }

    /// What the tag covers (see the module docs).
    fn message(&self, log: &str, signed_at: u64, payload: &[u8]) -> Vec<u8> {
        let mut m =
            Vec::with_capacity(CONTEXT.len() + self.stream.len() + log.len() + 11 + payload.len());
        m.extend_from_slice(CONTEXT);
        m.push(0);
        m.extend_from_slice(self.stream.as_bytes());
        m.push(0);
        m.extend_from_slice(log.as_bytes());
        m.push(0);
        m.extend_from_slice(&signed_at.to_be_bytes());
        m.extend_from_slice(payload);
        m
    }

    /// The proof of `payload` in `log`, signed at `now_ms`; `None` without a secret.
    pub fn sign(&self, log: &str, payload: &[u8], now_ms: u64) -> Option<[u8; PROOF_LEN]> {
        let key = self.current.as_ref()?;
        let tag = hmac::sign(key, &self.message(log, now_ms, payload));
        let mut out = [0u8; PROOF_LEN];
        out[0] = VERSION;
        out[1..9].copy_from_slice(&now_ms.to_be_bytes());
        out[9..].copy_from_slice(tag.as_ref());
        Some(out)
    }

    /// Checks a record of `log`: its payload, its proof header (if any), and the time
    /// Iggy appended it (`appended_us`, microseconds, from the message header).
    pub fn check(
        &self,
        log: &str,
        payload: &[u8],
        proof: Option<&[u8]>,
        appended_us: u64,
    ) -> Verdict {
        let Some(current) = &self.current else {
            return Verdict::Accepted;
        };
        let appended_ms = appended_us / 1_000;
        let Some(proof) = proof else {
            return match self.unsigned_before_ms {
                Some(before) if appended_ms < before => Verdict::Accepted,
                _ => Verdict::Unsigned,
            };
        };
        if proof.len() != PROOF_LEN || proof[0] != VERSION {
            return Verdict::Forged;
        }
        let mut at = [0u8; 8];
        at.copy_from_slice(&proof[1..9]);
        let signed_at = u64::from_be_bytes(at);
        let tag = &proof[9..];
        let message = self.message(log, signed_at, payload);
        let verifies = |key: &hmac::Key| hmac::verify(key, &message, tag).is_ok();
        if !verifies(current) && !self.previous.as_ref().is_some_and(verifies) {
            return Verdict::Forged;
        }
        if signed_at.abs_diff(appended_ms) > self.max_skew_ms {
            return Verdict::Stale;
        }
        Verdict::Accepted
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The user headers that carry `proof`.
pub fn headers(proof: &[u8; PROOF_LEN]) -> StoreResult<BTreeMap<HeaderKey, HeaderValue>> {
    let bad = |e: iggy::prelude::IggyError| StoreError::Internal(format!("meta proof header: {e}"));
    let key = HeaderKey::try_from(PROOF_HEADER).map_err(bad)?;
    let value = HeaderValue::from_raw(HeaderKind::Raw, proof).map_err(bad)?;
    Ok(BTreeMap::from([(key, value)]))
}

/// The proof a message carries, if any (its [`PROOF_HEADER`], raw).
pub fn header_of(m: &IggyMessage) -> Option<Vec<u8>> {
    let map = m.user_headers_map().ok().flatten()?;
    let key = HeaderKey::try_from(PROOF_HEADER).ok()?;
    map.get(&key)?.as_raw().ok().map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-meta-secret-of-at-least-32-bytes!!";
    const OTHER: &str = "another-secret-of-at-least-32-bytes!";
    const SKEW: u64 = 60_000;

    fn proof(secret: Option<&str>) -> MetaProof {
        MetaProof::new("__kafka_gateway", secret, None, SKEW, None)
    }

    #[test]
    fn a_signed_record_verifies_in_its_own_log_only() {
        let p = proof(Some(SECRET));
        let sig = p.sign("scram", b"{\"u\":\"iggy\"}", 1_000_000).unwrap();
        assert_eq!(
            p.check("scram", b"{\"u\":\"iggy\"}", Some(&sig), 1_000_000_000),
            Verdict::Accepted
        );
        // Another log, another payload, another stream, another key: refused.
        assert_eq!(
            p.check("acls", b"{\"u\":\"iggy\"}", Some(&sig), 1_000_000_000),
            Verdict::Forged
        );
        assert_eq!(
            p.check("scram", b"{\"u\":\"root\"}", Some(&sig), 1_000_000_000),
            Verdict::Forged
        );
        let elsewhere = MetaProof::new("other", Some(SECRET), None, SKEW, None);
        assert_eq!(
            elsewhere.check("scram", b"{\"u\":\"iggy\"}", Some(&sig), 1_000_000_000),
            Verdict::Forged
        );
        assert_eq!(
            proof(Some(OTHER)).check("scram", b"{\"u\":\"iggy\"}", Some(&sig), 1_000_000_000),
            Verdict::Forged
        );
    }

    #[test]
    fn unsigned_truncated_and_tampered_proofs_are_refused() {
        let p = proof(Some(SECRET));
        assert_eq!(p.check("acls", b"{}", None, 5), Verdict::Unsigned);
        let mut sig = p.sign("acls", b"{}", 7).unwrap();
        assert_eq!(
            p.check("acls", b"{}", Some(&sig[..40]), 7_000),
            Verdict::Forged
        );
        assert_eq!(p.check("acls", b"{}", Some(&[]), 7_000), Verdict::Forged);
        // The signed-at time is covered by the tag.
        sig[8] ^= 1;
        assert_eq!(p.check("acls", b"{}", Some(&sig), 7_000), Verdict::Forged);
        let mut sig = p.sign("acls", b"{}", 7).unwrap();
        sig[0] = 2;
        assert_eq!(p.check("acls", b"{}", Some(&sig), 7_000), Verdict::Forged);
        let mut sig = p.sign("acls", b"{}", 7).unwrap();
        sig[40] ^= 0x80;
        assert_eq!(p.check("acls", b"{}", Some(&sig), 7_000), Verdict::Forged);
    }

    #[test]
    fn a_replay_outside_the_skew_window_is_stale() {
        let p = proof(Some(SECRET));
        let sig = p.sign("members", b"beat", 10_000_000).unwrap();
        // Appended (Iggy's clock, microseconds) within the window either side: taken.
        for appended_ms in [10_000_000 - SKEW, 10_000_000, 10_000_000 + SKEW] {
            assert_eq!(
                p.check("members", b"beat", Some(&sig), appended_ms * 1_000),
                Verdict::Accepted
            );
        }
        assert_eq!(
            p.check(
                "members",
                b"beat",
                Some(&sig),
                (10_000_000 + SKEW + 1) * 1_000
            ),
            Verdict::Stale
        );
    }

    #[test]
    fn the_previous_secret_verifies_but_never_signs() {
        let rotating = MetaProof::new("s", Some(OTHER), Some(SECRET), SKEW, None);
        let old = MetaProof::new("s", Some(SECRET), None, SKEW, None);
        let by_old = old.sign("topics", b"r", 1).unwrap();
        assert_eq!(
            rotating.check("topics", b"r", Some(&by_old), 1_000),
            Verdict::Accepted
        );
        let by_new = rotating.sign("topics", b"r", 1).unwrap();
        assert_eq!(
            old.check("topics", b"r", Some(&by_new), 1_000),
            Verdict::Forged
        );
        // A previous secret alone turns nothing on.
        assert!(!MetaProof::new("s", None, Some(SECRET), SKEW, None).enabled());
    }

    #[test]
    fn without_a_secret_nothing_is_signed_or_checked() {
        let p = proof(None);
        assert!(p.sign("scram", b"x", 1).is_none());
        assert_eq!(p.check("scram", b"x", None, 1), Verdict::Accepted);
        assert_eq!(p.check("scram", b"x", Some(b"junk"), 1), Verdict::Accepted);
    }

    #[test]
    fn unsigned_records_are_taken_only_before_the_cutover() {
        let p = MetaProof::new("s", Some(SECRET), None, SKEW, Some(5_000));
        assert_eq!(p.check("acls", b"{}", None, 4_999_999), Verdict::Accepted);
        assert_eq!(p.check("acls", b"{}", None, 5_000_000), Verdict::Unsigned);
    }
}
