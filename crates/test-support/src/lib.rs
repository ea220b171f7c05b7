//! The shared harness of the integration tests that need a real Apache Iggy server, and
//! the small helpers those tests have in common (free ports, unique names, scratch
//! directories, log tails).
//!
//! [`iggy_server_bin`] reads `IGGY_SERVER_BIN`. Unset or empty, the caller skips and a
//! `SKIPPED: <what>: IGGY_SERVER_BIN not set` line is printed, unless `IGGY_REQUIRED=1`
//! (the test command sets it in CI), which makes that a failure. Set, the server is
//! expected: every failure to start it is a test failure that shows the end of the
//! server's log, never a skip. [`IggyServer`] runs the binary on loopback with free
//! ports, a fresh data directory and the root credentials [`IGGY_USER`] /
//! [`IGGY_PASSWORD`], and can kill, stop, restart, pause and resume it.
//!
//! [`cluster::IggyCluster`] runs three such servers as one replicated Iggy cluster, one
//! node per loopback address (127.0.0.1, 127.0.0.2, 127.0.0.3).
//!
//! [`certs`] makes throw-away certificate authorities and certificates for TLS tests.
//!
//! Everything here runs inside tests and reports failures by panicking, except
//! [`sasl_client`], a small Kafka SASL client that returns typed outcomes (tests and the
//! load tool authenticate with it).

pub mod certs;
pub mod cluster;
pub mod sasl_client;

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The environment variable naming the `iggy-server` binary.
pub const IGGY_SERVER_BIN: &str = "IGGY_SERVER_BIN";

/// The environment variable that makes the Iggy suites mandatory: set to `1` (as the test
/// command does in CI), a test that needs Iggy fails instead of skipping when
/// [`IGGY_SERVER_BIN`] is unset.
pub const IGGY_REQUIRED: &str = "IGGY_REQUIRED";

/// The start of the line [`iggy_server_bin`] writes to the process's stderr for each test
/// that gets a server: the test command counts them.
pub const ON_IGGY_MARK: &str = "ON IGGY:";

/// Whether [`IGGY_REQUIRED`] is `1`.
pub fn iggy_required() -> bool {
    std::env::var_os(IGGY_REQUIRED).is_some_and(|v| v == "1")
}

/// Root user of every server started here.
pub const IGGY_USER: &str = "iggy";

/// Root password of every server started here.
pub const IGGY_PASSWORD: &str = "iggy-test-secret";

/// How long a server may take to accept TCP connections after it was started.
pub const IGGY_STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

/// How long [`IggyServer::stop`] waits after SIGTERM before it kills the server.
pub const IGGY_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Lines of the server log shown when something fails.
const LOG_LINES: usize = 40;

/// The `iggy-server` binary named by `IGGY_SERVER_BIN` (after printing `ON IGGY: <what>`),
/// or `None` when the variable is unset or empty, after printing `SKIPPED: <what>:
/// IGGY_SERVER_BIN not set`; with [`IGGY_REQUIRED`] the latter panics instead.
///
/// The notice goes straight to the process's stderr so that it shows even when the test
/// harness captures output.
pub fn iggy_server_bin(what: &str) -> Option<PathBuf> {
    match std::env::var_os(IGGY_SERVER_BIN).filter(|v| !v.is_empty()) {
        Some(bin) => {
            // Counted by the test command (one line per test that runs against Iggy).
            let _ = writeln!(std::io::stderr(), "{ON_IGGY_MARK} {what}");
            Some(PathBuf::from(bin))
        }
        None if iggy_required() => panic!(
            "{what}: {IGGY_SERVER_BIN} not set and {IGGY_REQUIRED}=1: \
             the Iggy suites must run (point {IGGY_SERVER_BIN} at an iggy-server binary)"
        ),
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {what}: {IGGY_SERVER_BIN} not set"
            );
            None
        }
    }
}

/// A loopback port that was free a moment ago, and that no earlier call in this process
/// returned (a gateway given two equal ports refuses to start).
///
/// Taken below the system's ephemeral range (`ip_local_port_range`) when there is room:
/// a port from that range can be handed to any outgoing connection between this check and
/// the server's bind (an Iggy server once failed to start that way), a port below it only
/// to a process that asks for it by number.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(below) = ephemeral_start().filter(|&lo| lo > LOW_PORTS_FROM + 1000) {
        let span = u64::from(below - LOW_PORTS_FROM);
        let mut x = seed();
        for _ in 0..1000 {
            // xorshift64: spread the picks of concurrent test processes.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = LOW_PORTS_FROM + (x % span) as u16;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.push(port);
                return port;
            }
        }
    }
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free loopback port: {e}"));
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
    panic!("no loopback port that was not already given out")
}

/// Lowest port [`free_port`] picks outside the ephemeral range.
const LOW_PORTS_FROM: u16 = 20_000;

/// First port of the ephemeral range, where Linux tells it (read once per process).
fn ephemeral_start() -> Option<u16> {
    static START: std::sync::OnceLock<Option<u16>> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// A different starting point per process and call.
fn seed() -> u64 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ u64::from(CALLS.fetch_add(1, Ordering::Relaxed)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x | 1
}

/// A string no other call in this run, and no other run, returns: the process id, the
/// clock, and a counter. Only `[0-9-]`, so it fits topic, group and file names.
pub fn unique() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A name part unique to this call, for topics and groups; the same as [`unique`].
pub fn run_id() -> String {
    unique()
}

/// A fresh directory under the system temp dir; its owner removes it.
pub fn scratch_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("iggy-gateway-kafka-{what}-{}", unique()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create scratch dir {}: {e}", dir.display()));
    dir
}

/// A file's content, with invalid UTF-8 replaced; empty when it cannot be read.
pub fn read_lossy(path: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sends `signal` (a name such as `STOP`) to `pid` with kill(1).
fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One `iggy-server` process on loopback: TCP on [`IggyServer::address`], HTTP, QUIC and
/// WebSocket disabled (their addresses are free ports all the same, so that parallel
/// servers do not clash), a fresh data directory, root [`IGGY_USER`] / [`IGGY_PASSWORD`],
/// telemetry off. Killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct IggyServer {
    bin: PathBuf,
    dir: PathBuf,
    /// The TCP address clients connect to, `127.0.0.1:<port>`.
    pub address: String,
    spare_ports: [u16; 3],
    env: Vec<(String, String)>,
    args: Vec<String>,
    child: Option<Child>,
    paused: bool,
}

impl IggyServer {
    /// Starts `bin` and waits until it accepts TCP connections. Panics, with the end of
    /// the server's log, when it cannot be started, exits, or does not listen within
    /// [`IGGY_STARTUP_TIMEOUT`].
    pub fn start(bin: &Path) -> IggyServer {
        IggyServer::start_with(bin, &[])
    }

    /// [`IggyServer::start`] with extra environment variables, such as
    /// `IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL`; they apply to restarts too.
    pub fn start_with(bin: &Path, env: &[(&str, &str)]) -> IggyServer {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        IggyServer::start_at(bin, format!("127.0.0.1:{}", free_port()), env, Vec::new())
    }

    /// [`IggyServer::start_with`] on a given TCP address and with command-line
    /// arguments (a cluster node's `--replica-id`).
    fn start_at(
        bin: &Path,
        address: String,
        env: Vec<(String, String)>,
        args: Vec<String>,
    ) -> IggyServer {
        let mut server = IggyServer {
            bin: bin.to_path_buf(),
            dir: scratch_dir("iggy"),
            address,
            spare_ports: [free_port(), free_port(), free_port()],
            env,
            args,
            child: None,
            paused: false,
        };
        server.spawn();
        server.wait_ready();
        server
    }

    /// The data directory's parent, which also holds `server.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server's stdout or stderr (the whole of it) holds `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        read_lossy(&self.dir.join("server.log")).contains(needle)
    }

    /// The last lines of the server's stdout and stderr.
    pub fn log_tail(&self) -> String {
        tail(&read_lossy(&self.dir.join("server.log")), LOG_LINES)
    }

    fn spawn(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap_or_else(|e| panic!("open the iggy-server log in {}: {e}", self.dir.display()));
        let log2 = log
            .try_clone()
            .unwrap_or_else(|e| panic!("clone the iggy-server log handle: {e}"));
        let [http, quic, websocket] = self.spare_ports;
        let mut cmd = Command::new(&self.bin);
        cmd.current_dir(&self.dir)
            .env("IGGY_SYSTEM_PATH", self.dir.join("data"))
            .env("IGGY_TCP_ADDRESS", &self.address)
            .env("IGGY_HTTP_ENABLED", "false")
            .env("IGGY_QUIC_ENABLED", "false")
            .env("IGGY_WEBSOCKET_ENABLED", "false")
            .env("IGGY_HTTP_ADDRESS", format!("127.0.0.1:{http}"))
            .env("IGGY_QUIC_ADDRESS", format!("127.0.0.1:{quic}"))
            .env("IGGY_WEBSOCKET_ADDRESS", format!("127.0.0.1:{websocket}"))
            .env("IGGY_ROOT_USERNAME", IGGY_USER)
            .env("IGGY_ROOT_PASSWORD", IGGY_PASSWORD)
            .env("IGGY_TELEMETRY_ENABLED", "false");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.args(&self.args);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{IGGY_SERVER_BIN}={} cannot be started: {e}",
                    self.bin.display()
                )
            });
        self.child = Some(child);
        self.paused = false;
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn wait_ready(&mut self) {
        if let Err(why) = self.ready() {
            panic!("{why}");
        }
    }

    /// Waits until the process listens; why not, with the end of its log, when it exits
    /// first or does not listen within [`IGGY_STARTUP_TIMEOUT`].
    fn ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + IGGY_STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{IGGY_SERVER_BIN}={} exited ({status}) before listening on {}; \
                     end of its log:\n{}",
                    self.bin.display(),
                    self.address,
                    self.log_tail()
                ));
            }
            if TcpStream::connect(&self.address).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{IGGY_SERVER_BIN}={} did not listen on {} within {IGGY_STARTUP_TIMEOUT:?}; \
                     end of its log:\n{}",
                    self.bin.display(),
                    self.address,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the process (SIGKILL: no clean shutdown), keeping the data directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the process the way an operator does: SIGTERM, so that Iggy flushes what it
    /// acknowledged, and SIGKILL if it has not exited within [`IGGY_STOP_TIMEOUT`]. Keeps
    /// the data directory.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.paused {
            signal(child.id(), "CONT");
            self.paused = false;
        }
        if let Ok(None) = child.try_wait() {
            signal(child.id(), "TERM");
            let deadline = Instant::now() + IGGY_STOP_TIMEOUT;
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Stops the process (if it runs) and starts it again on the same address, ports and
    /// data directory.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
        self.wait_ready();
    }

    /// [`IggyServer::restart`], with why the server did not come back (it exited, or did
    /// not listen in time: the end of its log) instead of a panic; the process is
    /// stopped then.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.stop();
        self.spawn();
        let ready = self.ready();
        if ready.is_err() {
            self.stop();
        }
        ready
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered, as
    /// with a server stuck in a long pause. Undone by [`IggyServer::resume`].
    pub fn pause(&mut self) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("pause: iggy-server is not running"));
        assert!(signal(pid, "STOP"), "SIGSTOP to iggy-server {pid} failed");
        self.paused = true;
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(&mut self) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("resume: iggy-server is not running"));
        assert!(signal(pid, "CONT"), "SIGCONT to iggy-server {pid} failed");
        self.paused = false;
    }

    /// Whether the process runs (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }
}

impl Drop for IggyServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique(), unique());
        assert!(unique().chars().all(|c| c.is_ascii_digit() || c == '-'));
    }

    #[test]
    fn a_server_that_exits_at_once_fails_with_its_log() {
        // A stand-in "server" that writes a line and exits: starting it must panic, and
        // the panic must show the line.
        let dir = scratch_dir("fake-iggy");
        let script = dir.join("fake-iggy-server");
        fs::write(
            &script,
            "#!/bin/sh\necho 'fake server: refusing to start'\nexit 3\n",
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", script.display()));
        let ok = Command::new("chmod")
            .arg("+x")
            .arg(&script)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chmod +x {}", script.display());
        let panic = std::panic::catch_unwind(|| IggyServer::start(&script))
            .err()
            .unwrap_or_else(|| panic!("a server that exits must not start"));
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        let _ = fs::remove_dir_all(&dir);
        assert!(message.contains("exited"), "{message}");
        assert!(message.contains("refusing to start"), "{message}");
    }

    #[test]
    fn a_missing_binary_fails() {
        let missing = std::env::temp_dir().join(format!("no-such-iggy-server-{}", unique()));
        let panic = std::panic::catch_unwind(|| IggyServer::start(&missing));
        assert!(panic.is_err());
    }
}
