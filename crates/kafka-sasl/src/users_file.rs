//! The users file: the embedded deployment's credentials, one JSON document of users, each
//! with an optional salted PLAIN password hash (PBKDF2-HMAC-SHA-512) and SCRAM credentials.
//! Never a password in the clear. Changes (AlterUserScramCredentials) are written to a
//! temporary file and renamed over the old one, so a crash leaves the old or the new file.
//!
//! The document looks like this (binary values in standard base64):
//!
//! ```json
//! {"users": {"alice": {
//!     "plain": {"salt": "...", "iterations": 10000, "hash": "..."},
//!     "scram-sha-256": {"salt": "...", "iterations": 4096, "stored_key": "...", "server_key": "..."},
//!     "scram-sha-512": {"salt": "...", "iterations": 4096, "stored_key": "...", "server_key": "..."}
//! }}}
//! ```
//!
//! Every value is checked when the file is read (base64, lengths, iteration ranges), so a
//! bad file fails at start-up rather than at a client's login. The file is written with mode
//! 0600, and a file group or others may read or write is refused. Changes from the
//! gateway and from the `users` command are made under an exclusive lock on
//! `.<name>.lock` beside the file, so neither writes over the other's. A PLAIN check of an unknown user, or of one without a PLAIN hash, runs the same
//! PBKDF2 work against a dummy salt before failing, so the answer time does not tell
//! whether the user exists.

use crate::credentials::{Identity, PlainAuthenticator, ScramCredentialStore, ScramUserInfo};
use crate::error::{AuthFailure, FailureKind, SaslError};
use crate::scram::{MAX_SALT_BYTES, MIN_SALT_BYTES, ScramCredential, ScramMechanism};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// PBKDF2-HMAC-SHA-512 iterations for new PLAIN hashes.
///
/// Every PLAIN login pays this work on the gateway, so it is a trade between the cost of a
/// stolen file and the cost of a login flood: at 210 000 iterations (the figure for password
/// databases) one login takes about 0.2 s of a core, so a 2-core gateway manages about 10
/// logins a second and a handful of clients with wrong passwords keep it busy. 10 000 takes
/// about 9 ms. The file is the gateway's own (mode 0600); SCRAM, whose server side needs no
/// PBKDF2 at all, is the mechanism to prefer.
pub const PLAIN_ITERATIONS: u32 = 10_000;
/// Most PBKDF2 iterations a PLAIN hash read from the file may ask for (a bound on the
/// work one login can cost).
pub const MAX_PLAIN_ITERATIONS: u32 = 10_000_000;
/// Length of a PLAIN hash (PBKDF2-HMAC-SHA-512 output).
pub const PLAIN_HASH_BYTES: usize = 64;
/// Bytes of random salt for new PLAIN hashes.
pub const PLAIN_SALT_BYTES: usize = 32;
/// Longest username the file accepts, in bytes.
pub const MAX_USERNAME_BYTES: usize = 255;
/// Largest users file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The message every rejected PLAIN login gets, whatever the reason.
pub(crate) const BAD_PLAIN_LOGIN: &str = "Authentication failed: invalid username or password";

#[derive(Clone)]
struct PlainHash {
    salt: Vec<u8>,
    iterations: NonZeroU32,
    hash: Vec<u8>,
}

#[derive(Clone, Default)]
struct User {
    plain: Option<PlainHash>,
    scram: BTreeMap<ScramMechanism, ScramCredential>,
}

impl User {
    fn is_empty(&self) -> bool {
        self.plain.is_none() && self.scram.is_empty()
    }
}

// The serialized form.
#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    users: BTreeMap<String, UserDoc>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UserDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plain: Option<PlainDoc>,
    #[serde(
        rename = "scram-sha-256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    scram_sha_256: Option<ScramDoc>,
    #[serde(
        rename = "scram-sha-512",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    scram_sha_512: Option<ScramDoc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainDoc {
    salt: String,
    iterations: u32,
    hash: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScramDoc {
    salt: String,
    iterations: u32,
    stored_key: String,
    server_key: String,
}

/// Users and their credentials, optionally kept in a file.
pub struct UsersFile {
    path: Option<PathBuf>,
    users: Mutex<BTreeMap<String, User>>,
    plain_iterations: u32,
    dummy_salt: [u8; PLAIN_SALT_BYTES],
}

impl std::fmt::Debug for UsersFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsersFile")
            .field("path", &self.path)
            .field("users", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl UsersFile {
    /// Reads `path`; a missing file is an empty set of users that is created on first change.
    pub fn load(path: &Path) -> Result<UsersFile, SaslError> {
        let users = read_file(path)?;
        Ok(UsersFile::with(Some(path.to_path_buf()), users))
    }

    /// Reads the file again and takes its users (changes made by the `users` command while
    /// the gateway runs); a file that cannot be read or parsed leaves the current users in
    /// place and returns why. In memory only, it does nothing.
    pub fn reload(&self) -> Result<(), SaslError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Under the lock: a change being written is either all in the file read here or
        // not yet started, so a reload never brings back users a change just replaced.
        let mut guard = self.lock();
        *guard = read_file(path)?;
        Ok(())
    }

    /// Users kept in memory only (tests, development).
    pub fn in_memory() -> UsersFile {
        UsersFile::with(None, BTreeMap::new())
    }

    /// Users parsed from a JSON document, kept in memory only.
    pub fn from_json(json: &[u8]) -> Result<UsersFile, SaslError> {
        let users = parse(json).map_err(|reason| SaslError::UsersFile {
            path: "(in memory)".into(),
            reason,
        })?;
        Ok(UsersFile::with(None, users))
    }

    fn with(path: Option<PathBuf>, users: BTreeMap<String, User>) -> UsersFile {
        let mut dummy_salt = [0u8; PLAIN_SALT_BYTES];
        // The dummy salt only needs to be a salt; if the RNG fails the zero salt does as well.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut dummy_salt);
        UsersFile {
            path,
            users: Mutex::new(users),
            plain_iterations: PLAIN_ITERATIONS,
            dummy_salt,
        }
    }

    /// Uses `iterations` for PLAIN hashes set from now on and for the dummy work of unknown
    /// users (clamped to 1..=[`MAX_PLAIN_ITERATIONS`]). Tests use few; production keeps the
    /// default.
    pub fn with_plain_iterations(mut self, iterations: u32) -> UsersFile {
        self.plain_iterations = iterations.clamp(1, MAX_PLAIN_ITERATIONS);
        self
    }

    /// The file, if the users are kept in one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The users' names, sorted.
    pub fn users(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Sets `user`'s PLAIN password (stored as a salted hash) and writes the file.
    pub fn set_password(&self, user: &str, password: &str) -> Result<(), SaslError> {
        check_username(user)?;
        let mut salt = vec![0u8; PLAIN_SALT_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| SaslError::Invalid("no random salt: the system RNG failed".into()))?;
        let iterations = NonZeroU32::new(self.plain_iterations).unwrap_or(NonZeroU32::MIN);
        let mut hash = vec![0u8; PLAIN_HASH_BYTES];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA512,
            iterations,
            &salt,
            password.as_bytes(),
            &mut hash,
        );
        self.change(|users| {
            users.entry(user.to_string()).or_default().plain = Some(PlainHash {
                salt,
                iterations,
                hash,
            });
            true
        })
        .map(|_| ())
    }

    /// Sets `user`'s SCRAM credential (for the credential's mechanism) and writes the file:
    /// the synchronous form of [`ScramCredentialStore::upsert`], for tools.
    pub fn set_scram(&self, user: &str, credential: ScramCredential) -> Result<(), SaslError> {
        check_username(user)?;
        if !credential.is_well_formed() {
            return Err(SaslError::Invalid("malformed SCRAM credential".into()));
        }
        self.change(|users| {
            users
                .entry(user.to_string())
                .or_default()
                .scram
                .insert(credential.mechanism, credential);
            true
        })
        .map(|_| ())
    }

    /// Removes `user` and all their credentials; `false` when there was no such user.
    pub fn remove_user(&self, user: &str) -> Result<bool, SaslError> {
        self.change(|users| users.remove(user).is_some())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, User>> {
        // A panic while holding the lock cannot leave the map half-changed: changes are made
        // on a copy and swapped in whole, so a poisoned lock still guards consistent data.
        self.users.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `f` to the users as the file has them now (changes the `users` command made
    /// since the last reload are kept, not overwritten); when it reports a change, writes
    /// the file and then swaps the result in. The lock is held throughout so writes and
    /// reloads do not interleave.
    fn change(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, User>) -> bool,
    ) -> Result<bool, SaslError> {
        let mut guard = self.lock();
        // Across processes too: the `users` command and the gateway each read, change
        // and write the file under this lock, so neither writes over a change the other
        // made in between (a revocation undone).
        let _across = match &self.path {
            Some(path) => Some(lock_across_processes(path)?),
            None => None,
        };
        let mut users = match &self.path {
            Some(path) => read_file(path)?,
            None => guard.clone(),
        };
        if !f(&mut users) {
            return Ok(false);
        }
        users.retain(|_, u| !u.is_empty());
        if let Some(path) = &self.path {
            write_atomically(path, &serialize(&users)?).map_err(|e| SaslError::UsersFile {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        *guard = users;
        Ok(true)
    }

    /// The JSON document of the current users.
    pub fn to_json(&self) -> Result<Vec<u8>, SaslError> {
        serialize(&self.lock())
    }
}

/// The lock file beside `path` (`.<name>.lock`, mode 0600), held exclusively until the
/// returned file is dropped.
fn lock_across_processes(path: &Path) -> Result<std::fs::File, SaslError> {
    let file_error = |reason: String| SaslError::UsersFile {
        path: path.display().to_string(),
        reason,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "users".into());
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let lock = options
        .open(dir.join(format!(".{name}.lock")))
        .map_err(|e| file_error(format!("lock file: {e}")))?;
    lock.lock()
        .map_err(|e| file_error(format!("lock file: {e}")))?;
    Ok(lock)
}

/// Permission bits a users file may not have: any for group or others.
const SHARED_BITS: u32 = 0o077;

/// The users in `path`; a missing file has none. A file group or others may read or
/// write is refused: it holds password hashes and SCRAM keys.
fn read_file(path: &Path) -> Result<BTreeMap<String, User>, SaslError> {
    let file_error = |reason: String| SaslError::UsersFile {
        path: path.display().to_string(),
        reason,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(file_error(e.to_string())),
        Ok(meta) if meta.len() > MAX_FILE_BYTES => {
            Err(file_error(format!("larger than {MAX_FILE_BYTES} bytes")))
        }
        #[cfg(unix)]
        Ok(meta)
            if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & SHARED_BITS != 0 =>
        {
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
            Err(file_error(format!(
                "group or others may read or write it (mode {mode:o}); it holds password \
                 hashes and SCRAM keys: chmod 600 it"
            )))
        }
        Ok(_) => {
            let bytes = std::fs::read(path).map_err(|e| file_error(e.to_string()))?;
            parse(&bytes).map_err(file_error)
        }
    }
}

fn check_username(user: &str) -> Result<(), SaslError> {
    if user.is_empty() || user.len() > MAX_USERNAME_BYTES {
        return Err(SaslError::Invalid(format!(
            "a username must be 1..={MAX_USERNAME_BYTES} bytes"
        )));
    }
    if user.chars().any(char::is_control) {
        return Err(SaslError::Invalid(
            "a username must not contain control characters".into(),
        ));
    }
    Ok(())
}

fn decode(what: &str, user: &str, value: &str) -> Result<Vec<u8>, String> {
    B64.decode(value)
        .map_err(|_| format!("user {user:?}: {what} is not valid base64"))
}

fn parse(bytes: &[u8]) -> Result<BTreeMap<String, User>, String> {
    let doc: Document = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut users = BTreeMap::new();
    for (name, entry) in doc.users {
        check_username(&name).map_err(|e| format!("user {name:?}: {e}"))?;
        let mut user = User::default();
        if let Some(plain) = entry.plain {
            let salt = decode("plain salt", &name, &plain.salt)?;
            let hash = decode("plain hash", &name, &plain.hash)?;
            if salt.len() < MIN_SALT_BYTES || salt.len() > MAX_SALT_BYTES {
                return Err(format!(
                    "user {name:?}: plain salt must be {MIN_SALT_BYTES}..={MAX_SALT_BYTES} bytes"
                ));
            }
            if hash.len() != PLAIN_HASH_BYTES {
                return Err(format!(
                    "user {name:?}: plain hash must be {PLAIN_HASH_BYTES} bytes"
                ));
            }
            let iterations = NonZeroU32::new(plain.iterations)
                .filter(|i| i.get() <= MAX_PLAIN_ITERATIONS)
                .ok_or_else(|| {
                    format!("user {name:?}: plain iterations must be 1..={MAX_PLAIN_ITERATIONS}")
                })?;
            user.plain = Some(PlainHash {
                salt,
                iterations,
                hash,
            });
        }
        for (mechanism, scram) in [
            (ScramMechanism::Sha256, entry.scram_sha_256),
            (ScramMechanism::Sha512, entry.scram_sha_512),
        ] {
            let Some(scram) = scram else { continue };
            let credential = ScramCredential {
                mechanism,
                salt: decode("SCRAM salt", &name, &scram.salt)?,
                iterations: scram.iterations,
                stored_key: decode("SCRAM stored_key", &name, &scram.stored_key)?,
                server_key: decode("SCRAM server_key", &name, &scram.server_key)?,
            };
            if !credential.is_well_formed() {
                return Err(format!(
                    "user {name:?}: {} credential has wrong lengths or iterations",
                    mechanism.name()
                ));
            }
            user.scram.insert(mechanism, credential);
        }
        if !user.is_empty() {
            users.insert(name, user);
        }
    }
    Ok(users)
}

fn serialize(users: &BTreeMap<String, User>) -> Result<Vec<u8>, SaslError> {
    let scram_doc = |c: &ScramCredential| ScramDoc {
        salt: B64.encode(&c.salt),
        iterations: c.iterations,
        stored_key: B64.encode(&c.stored_key),
        server_key: B64.encode(&c.server_key),
    };
    let doc = Document {
        users: users
            .iter()
            .map(|(name, user)| {
                let entry = UserDoc {
                    plain: user.plain.as_ref().map(|p| PlainDoc {
                        salt: B64.encode(&p.salt),
                        iterations: p.iterations.get(),
                        hash: B64.encode(&p.hash),
                    }),
                    scram_sha_256: user.scram.get(&ScramMechanism::Sha256).map(scram_doc),
                    scram_sha_512: user.scram.get(&ScramMechanism::Sha512).map(scram_doc),
                };
                (name.clone(), entry)
            })
            .collect(),
    };
    let mut out = serde_json::to_vec_pretty(&doc).map_err(|e| SaslError::Invalid(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

/// Writes `bytes` to a new temporary file (mode 0600) next to `path`, syncs it and renames
/// it over `path`, then syncs the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "users".into());
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        // Make the rename itself durable; not every platform can open a directory.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl UsersFile {
    /// Checks `password` against `user`'s PLAIN hash: the synchronous form of
    /// [`PlainAuthenticator::authenticate`]. It costs one full PBKDF2 (tens to hundreds of
    /// milliseconds), so async callers that must not stall their executor run it on a
    /// blocking thread.
    pub fn check_password(&self, username: &str, password: &str) -> Result<Identity, AuthFailure> {
        let stored = self.lock().get(username).and_then(|u| u.plain.clone());
        // At most half the cores hash at once, whatever the number of logins in progress:
        // a PLAIN flood waits here instead of taking every core from the other clients.
        let _slot = HASHING.enter();
        let ok = match stored {
            Some(p) => ring::pbkdf2::verify(
                ring::pbkdf2::PBKDF2_HMAC_SHA512,
                p.iterations,
                &p.salt,
                password.as_bytes(),
                &p.hash,
            )
            .is_ok(),
            None => {
                // Same work as a known user, then fail whatever the result.
                let mut sink = [0u8; PLAIN_HASH_BYTES];
                ring::pbkdf2::derive(
                    ring::pbkdf2::PBKDF2_HMAC_SHA512,
                    NonZeroU32::new(self.plain_iterations).unwrap_or(NonZeroU32::MIN),
                    &self.dummy_salt,
                    password.as_bytes(),
                    &mut sink,
                );
                std::hint::black_box(&sink);
                false
            }
        };
        if ok {
            Ok(Identity {
                name: username.to_string(),
                expires_at: None,
            })
        } else {
            Err(AuthFailure::new(
                FailureKind::BadCredentials,
                BAD_PLAIN_LOGIN,
            ))
        }
    }
}

/// PLAIN hashes computed at once in the process: half the cores, at least one.
static HASHING: HashGate = HashGate::new();

/// A counting gate for blocking threads (the PBKDF2 of PLAIN checks runs on them).
struct HashGate {
    busy: Mutex<usize>,
    freed: std::sync::Condvar,
}

impl HashGate {
    const fn new() -> HashGate {
        HashGate {
            busy: Mutex::new(0),
            freed: std::sync::Condvar::new(),
        }
    }

    fn limit() -> usize {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    }

    fn enter(&'static self) -> HashSlot {
        let limit = HashGate::limit();
        // The counter is only incremented and decremented: a poisoned lock still holds a
        // meaningful count.
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        while *busy >= limit {
            busy = self.freed.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy += 1;
        HashSlot(self)
    }
}

/// One hashing slot, given back on drop.
struct HashSlot(&'static HashGate);

impl Drop for HashSlot {
    fn drop(&mut self) {
        let mut busy = self.0.busy.lock().unwrap_or_else(|e| e.into_inner());
        *busy = busy.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

#[async_trait]
impl PlainAuthenticator for UsersFile {
    /// Runs [`UsersFile::check_password`] in place (see there for its cost).
    async fn authenticate(&self, username: &str, password: &str) -> Result<Identity, AuthFailure> {
        self.check_password(username, password)
    }
}

#[async_trait]
impl ScramCredentialStore for UsersFile {
    async fn credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, SaslError> {
        Ok(self
            .lock()
            .get(user)
            .and_then(|u| u.scram.get(&mechanism).cloned()))
    }

    async fn describe(&self, users: Option<&[String]>) -> Result<Vec<ScramUserInfo>, SaslError> {
        let all = self.lock();
        let info = |(name, user): (&String, &User)| {
            (!user.scram.is_empty()).then(|| ScramUserInfo {
                user: name.clone(),
                credentials: user.scram.iter().map(|(m, c)| (*m, c.iterations)).collect(),
            })
        };
        Ok(match users {
            None => all.iter().filter_map(info).collect(),
            Some(wanted) => {
                let mut names: Vec<&String> = wanted.iter().collect();
                names.sort();
                names.dedup();
                names
                    .into_iter()
                    .filter_map(|n| all.get_key_value(n))
                    .filter_map(info)
                    .collect()
            }
        })
    }

    async fn upsert(&self, user: &str, credential: ScramCredential) -> Result<(), SaslError> {
        self.set_scram(user, credential)
    }

    async fn delete(&self, user: &str, mechanism: ScramMechanism) -> Result<bool, SaslError> {
        self.change(|users| {
            users
                .get_mut(user)
                .is_some_and(|u| u.scram.remove(&mechanism).is_some())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn fast() -> UsersFile {
        UsersFile::in_memory().with_plain_iterations(10)
    }

    #[test]
    fn plain_password_checks() {
        let users = fast();
        users.set_password("alice", "secret").expect("set");
        let ok = block_on(users.authenticate("alice", "secret")).expect("accepted");
        assert_eq!(ok.name, "alice");
        assert_eq!(ok.expires_at, None);
        let wrong = block_on(users.authenticate("alice", "Secret")).expect_err("wrong password");
        let unknown = block_on(users.authenticate("bob", "secret")).expect_err("unknown user");
        assert_eq!(
            wrong, unknown,
            "an unknown user looks like a wrong password"
        );
        assert_eq!(wrong.kind, FailureKind::BadCredentials);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.json");
        std::fs::write(&path, b"{\"users\": {}}").expect("write");
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let Err(SaslError::UsersFile { reason, .. }) = UsersFile::load(&path) else {
                panic!("mode {mode:o} was accepted");
            };
            assert!(reason.contains("chmod 600"), "{reason}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let users = UsersFile::load(&path).expect("0600 is fine");
        // A reload that meets a shared file keeps the users it has.
        users.set_password("alice", "pw").expect("set");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(users.reload().is_err());
        assert_eq!(users.users(), ["alice"]);
    }

    #[test]
    fn a_change_waits_for_the_lock_another_process_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.json");
        let users = std::sync::Arc::new(
            UsersFile::load(&path)
                .expect("load")
                .with_plain_iterations(10),
        );
        users.set_password("alice", "pw").expect("set");
        // Another holder of the lock (the `users` command): the change waits for it, and
        // then sees what the holder wrote instead of writing over it.
        let held = lock_across_processes(&path).expect("lock");
        let writer = {
            let users = users.clone();
            std::thread::spawn(move || users.set_password("bob", "pw").expect("set"))
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !writer.is_finished(),
            "the change did not wait for the lock"
        );
        let other = UsersFile::load(&path)
            .expect("load")
            .with_plain_iterations(10);
        // What the other process does while it holds the lock: remove alice.
        let mut doc = other.lock().clone();
        doc.remove("alice");
        write_atomically(&path, &serialize(&doc).expect("json")).expect("write");
        drop(held);
        writer.join().expect("writer");
        let now = UsersFile::load(&path).expect("load");
        assert_eq!(now.users(), ["bob"], "the revocation was undone");
    }

    #[test]
    fn file_round_trip_with_0600_and_atomic_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.json");
        let users = UsersFile::load(&path)
            .expect("missing file is empty")
            .with_plain_iterations(10);
        assert!(users.users().is_empty());
        assert!(!path.exists(), "nothing written before the first change");
        users.set_password("alice", "pw1").expect("set");
        let scram = ScramCredential::from_password(ScramMechanism::Sha512, "pw2", 4096)
            .expect("credential");
        block_on(users.upsert("bob", scram.clone())).expect("upsert");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name() != "users.json" && e.file_name() != ".users.json.lock")
            .collect();
        assert!(leftovers.is_empty(), "no temporary file left behind");

        let text = std::fs::read_to_string(&path).expect("read");
        assert!(!text.contains("pw1") && !text.contains("pw2"));
        let reread = UsersFile::load(&path).expect("reload");
        assert_eq!(reread.users(), vec!["alice".to_string(), "bob".to_string()]);
        assert!(block_on(reread.authenticate("alice", "pw1")).is_ok());
        let got = block_on(reread.credential("bob", ScramMechanism::Sha512)).expect("read");
        assert_eq!(got, Some(scram));
        assert_eq!(
            block_on(reread.credential("bob", ScramMechanism::Sha256)).expect("read"),
            None
        );
    }

    #[test]
    fn reload_takes_outside_changes_and_keeps_users_on_a_bad_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.json");
        let running = UsersFile::load(&path)
            .expect("load")
            .with_plain_iterations(10);
        running.set_password("alice", "a").expect("set");
        let tool = UsersFile::load(&path)
            .expect("load")
            .with_plain_iterations(10);
        tool.set_password("bob", "b").expect("set");
        assert!(block_on(running.authenticate("bob", "b")).is_err());
        running.reload().expect("reload");
        assert!(block_on(running.authenticate("bob", "b")).is_ok());
        std::fs::write(&path, b"{broken").expect("write");
        assert!(running.reload().is_err());
        assert!(
            block_on(running.authenticate("alice", "a")).is_ok(),
            "old users kept"
        );
    }

    #[test]
    fn a_change_keeps_what_another_writer_put_in_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.json");
        let running = UsersFile::load(&path)
            .expect("load")
            .with_plain_iterations(10);
        running.set_password("alice", "a").expect("set");
        // The `users` command adds bob; the running gateway has not reloaded yet when a
        // client sets carol's SCRAM credential.
        let tool = UsersFile::load(&path)
            .expect("load")
            .with_plain_iterations(10);
        tool.set_password("bob", "b").expect("set");
        let c = ScramCredential::from_password(ScramMechanism::Sha256, "c", 4096).expect("c");
        block_on(running.upsert("carol", c)).expect("upsert");
        let on_disk = UsersFile::load(&path).expect("load");
        assert_eq!(on_disk.users(), ["alice", "bob", "carol"]);
        assert_eq!(running.users(), ["alice", "bob", "carol"]);
        // A file that cannot be read stops the change instead of overwriting it.
        std::fs::write(&path, b"{broken").expect("write");
        let d = ScramCredential::from_password(ScramMechanism::Sha256, "d", 4096).expect("c");
        assert!(block_on(running.upsert("dave", d)).is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"{broken");
    }

    #[test]
    fn describe_and_delete() {
        let users = fast();
        let c256 = ScramCredential::from_password(ScramMechanism::Sha256, "x", 4096).expect("c");
        let c512 = ScramCredential::from_password(ScramMechanism::Sha512, "x", 8192).expect("c");
        block_on(users.upsert("zed", c256.clone())).expect("upsert");
        block_on(users.upsert("amy", c256)).expect("upsert");
        block_on(users.upsert("amy", c512)).expect("upsert");
        users.set_password("plainonly", "pw").expect("set");
        let all = block_on(users.describe(None)).expect("describe");
        let names: Vec<_> = all.iter().map(|u| u.user.as_str()).collect();
        assert_eq!(names, ["amy", "zed"]);
        assert_eq!(
            all[0].credentials,
            vec![
                (ScramMechanism::Sha256, 4096),
                (ScramMechanism::Sha512, 8192)
            ]
        );
        let some = block_on(users.describe(Some(&["zed".into(), "nobody".into()]))).expect("d");
        assert_eq!(some.len(), 1);
        assert!(block_on(users.delete("zed", ScramMechanism::Sha256)).expect("delete"));
        assert!(!block_on(users.delete("zed", ScramMechanism::Sha256)).expect("delete"));
        assert!(
            !users.users().contains(&"zed".to_string()),
            "empty user dropped"
        );
    }

    #[test]
    fn bad_documents_are_refused() {
        for bad in [
            &br#"{"users":{"a":{"plain":{"salt":"!!","iterations":1,"hash":"AA=="}}}}"#[..],
            br#"{"users":{"a":{"plain":{"salt":"AAAAAAAAAAA=","iterations":0,"hash":"AA=="}}}}"#,
            br#"{"users":{"a":{"scram-sha-256":{"salt":"AAAAAAAAAAA=","iterations":4096,"stored_key":"AA==","server_key":"AA=="}}}}"#,
            br#"{"users":{"a":{"unknown":{}}}}"#,
            br#"{"users":{"":{}}}"#,
            br#"not json"#,
        ] {
            assert!(UsersFile::from_json(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(UsersFile::from_json(br#"{"users":{}}"#).is_ok());
    }

    #[test]
    fn usernames_are_bounded() {
        let users = fast();
        assert!(users.set_password("", "pw").is_err());
        assert!(users.set_password(&"a".repeat(256), "pw").is_err());
        assert!(users.set_password("a\nb", "pw").is_err());
    }
}
