//! Kafka SASL credentials with the bridge: PLAIN passwords are Iggy's, SCRAM credentials
//! live in the bridge's meta stream.
//!
//! [`IggyPlainAuthenticator`] checks a username and password by logging in to Iggy as
//! that user on a fresh connection of its own (TLS as configured), logging out and
//! dropping it; the bridge's sessions never change identity. The whole check, connect
//! included, is bounded by `call_timeout`. A success is remembered for
//! `plain_cache_ttl`, for at most `plain_cache_entries` users (the oldest entry is
//! dropped first), so a client that reconnects often does not cost an Iggy login each
//! time. What is remembered is not the password: it is an HMAC-SHA256 tag of a random
//! per-entry salt, the username and the password, under a key drawn at random when the
//! authenticator is made and never stored. A memory dump therefore yields nothing to try
//! against Iggy, and a wrong password is compared in constant time. Failures are not
//! remembered, so a password set in Iggy works at once; a password changed or a user
//! deleted in Iggy keeps working for this gateway until its entry expires.
//!
//! Outcomes: Iggy refusing the credentials (unknown user, wrong password, inactive user)
//! is [`FailureKind::BadCredentials`], all with one message, as is an empty username or
//! password or one longer than Iggy's login request carries (255 bytes), refused
//! without asking Iggy; Iggy unreachable, a failed
//! TLS handshake or no answer in time is [`FailureKind::Unavailable`]. Neither message
//! names the user's password, and unavailability is logged at most once per
//! [`UNAVAILABLE_LOG_INTERVAL`].
//!
//! [`IggyScramStore`] implements [`ScramCredentialStore`] on the meta stream's `scram`
//! log (see `crate::meta`); get one from [`crate::IggyBridge::scram_store`].

use crate::IggyBridge;
use crate::config::BridgeConfig;
use crate::connection::connect_manual;
use async_trait::async_trait;
use iggy::prelude::{Client, IggyClient, IggyError, UserClient};
use kafka_sasl::{
    AuthFailure, FailureKind, Identity, PlainAuthenticator, SaslError, ScramCredential,
    ScramCredentialStore, ScramMechanism, ScramUserInfo,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The message a client gets when Iggy refuses its credentials, whatever the reason.
const BAD_CREDENTIALS: &str = "Authentication failed: invalid username or password";

/// The message a client gets when Iggy cannot be asked.
const UNAVAILABLE: &str = "Authentication failed: the credential store is unavailable";

/// Least time between two log lines about Iggy being unavailable for PLAIN checks.
pub const UNAVAILABLE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Longest username or password Iggy's login request can carry.
const MAX_LOGIN_FIELD_BYTES: usize = 255;

/// Longest wait for a check's connection to close.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(1);

/// Salt bytes per cache entry.
const SALT_LEN: usize = 16;

/// The `outcome` label of the PLAIN check counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// Checks SASL/PLAIN credentials by logging in to Iggy, remembering successes briefly.
pub struct IggyPlainAuthenticator {
    config: BridgeConfig,
    cache: Mutex<PlainCache>,
    logins: AtomicU64,
    cache_hits: AtomicU64,
    /// Checks by outcome, for Prometheus.
    checks: Family<OutcomeLabel, Counter>,
    /// When unavailability was last logged, and how many failures since.
    unavailable_log: Mutex<(Option<Instant>, u64)>,
}

impl std::fmt::Debug for IggyPlainAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyPlainAuthenticator")
            .field("address", &self.config.address)
            .field("tls_enabled", &self.config.tls_enabled)
            .field("plain_cache_ttl", &self.config.plain_cache_ttl)
            .field("plain_cache_entries", &self.config.plain_cache_entries)
            .finish_non_exhaustive()
    }
}

impl IggyPlainAuthenticator {
    /// An authenticator for the Iggy server of `config` (its address, TLS settings,
    /// `call_timeout` and PLAIN cache bounds; the bridge's own credentials are not used).
    /// Fails only when the system's random source does.
    pub fn new(config: &BridgeConfig) -> Result<IggyPlainAuthenticator, SaslError> {
        Ok(IggyPlainAuthenticator {
            config: config.clone(),
            cache: Mutex::new(PlainCache::new(
                config.plain_cache_ttl,
                config.plain_cache_entries,
            )?),
            logins: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            checks: Family::default(),
            unavailable_log: Mutex::new((None, 0)),
        })
    }

    /// Adds `kafka_gateway_iggy_plain_checks_total{outcome}` (`cached`, `ok`,
    /// `bad_credentials`, `unavailable`) to `registry`. Counted from the start either way.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix("kafka_gateway_iggy")
            .register(
                "plain_checks",
                "SASL/PLAIN checks against Iggy, by outcome (cached: answered without a login)",
                self.checks.clone(),
            );
    }

    fn count(&self, outcome: &'static str) {
        self.checks.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Logins attempted against Iggy so far (each check not answered from the cache).
    pub fn iggy_logins(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }

    /// Checks answered from the cache so far.
    pub fn cache_hits(&self) -> u64 {
        self.cache_hits.load(Ordering::Relaxed)
    }

    /// Users remembered right now (expired entries included until they are looked up
    /// or pushed out).
    pub fn cached_users(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    /// Logs in to Iggy as `username` on a connection of its own.
    async fn login(&self, username: &str, password: &str) -> Result<(), AuthFailure> {
        self.logins.fetch_add(1, Ordering::Relaxed);
        let limit = self.config.call_timeout;
        let check = async {
            let client = connect_manual(&self.config).await?;
            let outcome = login_once(&client, username, password).await;
            // Closed either way. Closing is local work (the socket, the SDK's tasks), so
            // a short bound keeps a stuck server from doubling the check's time.
            let _ = tokio::time::timeout(limit.min(SHUTDOWN_LIMIT), client.shutdown()).await;
            outcome
        };
        let outcome = tokio::time::timeout(limit, check).await;
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(
                IggyError::InvalidCredentials
                | IggyError::InvalidUsername
                | IggyError::InvalidPassword
                | IggyError::UserInactive
                | IggyError::Unauthenticated
                | IggyError::Unauthorized,
            )) => Err(AuthFailure::new(
                FailureKind::BadCredentials,
                BAD_CREDENTIALS,
            )),
            Ok(Err(e)) => Err(self.unavailable(&format!("iggy error {}: {e}", e.as_code()))),
            Err(_) => Err(self.unavailable(&format!("no answer within {limit:?}"))),
        }
    }

    /// The failure for an unreachable Iggy, logged at most once per interval.
    fn unavailable(&self, reason: &str) -> AuthFailure {
        if let Ok(mut log) = self.unavailable_log.lock() {
            let now = Instant::now();
            log.1 += 1;
            let due = log
                .0
                .is_none_or(|at| now.duration_since(at) >= UNAVAILABLE_LOG_INTERVAL);
            if due {
                tracing::warn!(
                    address = %self.config.address,
                    failures = log.1,
                    error = %reason,
                    "cannot check SASL/PLAIN credentials against Iggy"
                );
                *log = (Some(now), 0);
            }
        }
        AuthFailure::new(FailureKind::Unavailable, UNAVAILABLE)
    }
}

/// Whether a username or password can be sent in Iggy's login request, whose length
/// prefixes are one byte.
fn fits_iggy_login(text: &str) -> bool {
    (1..=MAX_LOGIN_FIELD_BYTES).contains(&text.len())
}

async fn login_once(client: &IggyClient, username: &str, password: &str) -> Result<(), IggyError> {
    client.connect().await?;
    client.login_user(username, password).await?;
    // The connection is dropped next; a failed logout changes nothing.
    let _ = client.logout_user().await;
    Ok(())
}

#[async_trait]
impl PlainAuthenticator for IggyPlainAuthenticator {
    async fn authenticate(&self, username: &str, password: &str) -> Result<Identity, AuthFailure> {
        let identity = || Identity {
            name: username.to_owned(),
            expires_at: None,
        };
        let hit = self
            .cache
            .lock()
            .is_ok_and(|mut c| c.check(username, password, Instant::now()));
        if hit {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            self.count("cached");
            return Ok(identity());
        }
        let checked = if fits_iggy_login(username) && fits_iggy_login(password) {
            self.login(username, password).await
        } else {
            // No Iggy user can have it, and Iggy's login request cannot carry it.
            Err(AuthFailure::new(
                FailureKind::BadCredentials,
                BAD_CREDENTIALS,
            ))
        };
        if let Err(failure) = checked {
            self.count(match failure.kind {
                FailureKind::Unavailable => "unavailable",
                _ => "bad_credentials",
            });
            return Err(failure);
        }
        self.count("ok");
        if let Ok(mut cache) = self.cache.lock() {
            cache.remember(username, password, Instant::now());
        }
        Ok(identity())
    }
}

/// Successful PLAIN checks, by user: a keyed, salted tag of the password and when it
/// was remembered. Time is passed in.
struct PlainCache {
    ttl: Duration,
    capacity: usize,
    key: hmac::Key,
    rng: SystemRandom,
    entries: HashMap<String, Entry>,
    /// Insertion number -> user, oldest first, for eviction.
    order: BTreeMap<u64, String>,
    next: u64,
}

struct Entry {
    salt: [u8; SALT_LEN],
    tag: hmac::Tag,
    at: Instant,
    seq: u64,
}

impl PlainCache {
    fn new(ttl: Duration, capacity: usize) -> Result<PlainCache, SaslError> {
        let rng = SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| SaslError::Store("no random source for the PLAIN cache key".into()))?;
        Ok(PlainCache {
            ttl,
            capacity,
            key,
            rng,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
        })
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn enabled(&self) -> bool {
        self.capacity > 0 && !self.ttl.is_zero()
    }

    fn message(salt: &[u8], username: &str, password: &str) -> Vec<u8> {
        let mut m = Vec::with_capacity(salt.len() + 8 + username.len() + password.len());
        m.extend_from_slice(salt);
        // Length-prefixed, so ("ab","c") and ("a","bc") differ.
        m.extend_from_slice(&(username.len() as u64).to_be_bytes());
        m.extend_from_slice(username.as_bytes());
        m.extend_from_slice(password.as_bytes());
        m
    }

    /// Whether `password` is the one remembered for `username` and not expired. An
    /// expired entry is dropped.
    fn check(&mut self, username: &str, password: &str, now: Instant) -> bool {
        let Some(entry) = self.entries.get(username) else {
            return false;
        };
        if now.saturating_duration_since(entry.at) >= self.ttl {
            self.forget(username);
            return false;
        }
        let message = Self::message(&entry.salt, username, password);
        hmac::verify(&self.key, &message, entry.tag.as_ref()).is_ok()
    }

    /// Remembers a successful check, replacing the user's entry, dropping the oldest
    /// entries beyond the capacity.
    fn remember(&mut self, username: &str, password: &str, now: Instant) {
        if !self.enabled() {
            return;
        }
        let mut salt = [0u8; SALT_LEN];
        if self.rng.fill(&mut salt).is_err() {
            // Without a salt nothing is remembered; the next check asks Iggy.
            return;
        }
        let tag = hmac::sign(&self.key, &Self::message(&salt, username, password));
        self.forget(username);
        let seq = self.next;
        self.next += 1;
        self.order.insert(seq, username.to_owned());
        self.entries.insert(
            username.to_owned(),
            Entry {
                salt,
                tag,
                at: now,
                seq,
            },
        );
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    fn forget(&mut self, username: &str) {
        if let Some(old) = self.entries.remove(username) {
            self.order.remove(&old.seq);
        }
    }
}

/// SCRAM credentials in the bridge's meta stream (log `scram`): durable before a change
/// returns, read back at every connect.
#[derive(Debug, Clone)]
pub struct IggyScramStore {
    bridge: IggyBridge,
}

impl IggyScramStore {
    /// The store of `bridge`'s meta stream.
    pub fn new(bridge: IggyBridge) -> IggyScramStore {
        IggyScramStore { bridge }
    }
}

fn store_error(e: kafka_store::StoreError) -> SaslError {
    SaslError::Store(e.to_string())
}

#[async_trait]
impl ScramCredentialStore for IggyScramStore {
    async fn credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, SaslError> {
        self.bridge
            .meta()
            .scram(user, mechanism)
            .map_err(store_error)
    }

    async fn describe(&self, users: Option<&[String]>) -> Result<Vec<ScramUserInfo>, SaslError> {
        self.bridge.meta().scram_users(users).map_err(store_error)
    }

    async fn upsert(&self, user: &str, credential: ScramCredential) -> Result<(), SaslError> {
        self.bridge
            .meta()
            .put_scram(self.bridge.meta_session(), user, &credential)
            .await
            .map_err(store_error)
    }

    async fn delete(&self, user: &str, mechanism: ScramMechanism) -> Result<bool, SaslError> {
        self.bridge
            .meta()
            .delete_scram(self.bridge.meta_session(), user, mechanism)
            .await
            .map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(ttl_secs: u64, capacity: usize) -> PlainCache {
        PlainCache::new(Duration::from_secs(ttl_secs), capacity).unwrap()
    }

    #[test]
    fn a_remembered_password_matches_and_no_other_does() {
        let mut c = cache(60, 10);
        let t0 = Instant::now();
        assert!(!c.check("alice", "pw", t0));
        c.remember("alice", "pw", t0);
        assert!(c.check("alice", "pw", t0));
        assert!(!c.check("alice", "pw2", t0));
        assert!(!c.check("alic", "epw", t0));
        assert!(!c.check("bob", "pw", t0));
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let mut c = cache(60, 10);
        let t0 = Instant::now();
        c.remember("alice", "pw", t0);
        assert!(c.check("alice", "pw", t0 + Duration::from_secs(59)));
        assert!(!c.check("alice", "pw", t0 + Duration::from_secs(60)));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn the_oldest_entry_goes_first() {
        let mut c = cache(60, 2);
        let t0 = Instant::now();
        c.remember("a", "1", t0);
        c.remember("b", "2", t0);
        // Re-remembering "a" makes it the newest.
        c.remember("a", "1", t0);
        c.remember("c", "3", t0);
        assert_eq!(c.len(), 2);
        assert!(c.check("a", "1", t0));
        assert!(!c.check("b", "2", t0));
        assert!(c.check("c", "3", t0));
        assert_eq!(c.order.len(), 2);
    }

    #[test]
    fn zero_bounds_remember_nothing() {
        let t0 = Instant::now();
        for mut c in [cache(0, 10), cache(60, 0)] {
            c.remember("a", "1", t0);
            assert!(!c.check("a", "1", t0));
        }
    }

    #[test]
    fn the_cache_holds_no_password() {
        let mut c = cache(60, 10);
        let t0 = Instant::now();
        let password = "correct horse battery staple";
        c.remember("alice", password, t0);
        let entry = &c.entries["alice"];
        let stored = [entry.salt.as_slice(), entry.tag.as_ref()].concat();
        assert!(
            !stored
                .windows(password.len())
                .any(|w| w == password.as_bytes())
        );
        // Two caches (two processes) tag the same password differently.
        let mut other = cache(60, 10);
        other.remember("alice", password, t0);
        assert_ne!(entry.tag.as_ref(), other.entries["alice"].tag.as_ref());
    }
}
