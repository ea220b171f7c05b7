//! Harness for the integration tests that run real Kafka clients against the gateway
//! binary: start a fresh gateway on a random loopback port, find the repository root,
//! detect the installed clients (`scripts/install-clients.sh` puts them in `.clients/`),
//! run one client script in its own process group with a timeout and report its output
//! and the gateway's log when it fails.
//!
//! A client that is not installed is skipped with `SKIPPED: <client> not installed (run
//! scripts/test.sh)`, unless `KAFKA_CLIENTS_REQUIRED=1`, which makes it a failure. The
//! Iggy server behind the `_on_iggy` tests comes from the shared `test-support` crate.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub mod attack;
pub mod background;
pub mod failover;
pub mod security;
pub mod trio;

pub use test_support::{IggyServer, read_lossy, scratch_dir, tail, unique};

/// How long the gateway may take to write its listen line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A topic prefix no other test (or run) uses, of characters valid in a topic name.
pub fn topic_prefix(test: &str) -> String {
    let name: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{name}-{}", unique())
}

/// The bound address from the first stdout line, `listening on <BOUND> advertised
/// <HOST:PORT>` (apps/gateway/src/main.rs). `None` until that line is complete.
pub fn parse_listen_line(stdout: &str) -> Option<Result<SocketAddr, String>> {
    let (line, _) = stdout.split_once('\n')?;
    let parsed = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_once(" advertised "))
        .filter(|(_, adv)| !adv.is_empty() && !adv.contains(' '))
        .and_then(|(bound, _)| bound.parse::<SocketAddr>().ok())
        .filter(|a| a.port() != 0);
    Some(parsed.ok_or_else(|| format!("unexpected first stdout line: {line:?}")))
}

/// The gateway binary on `127.0.0.1:0`; killed, and its scratch dir removed, on drop.
pub struct Gateway {
    /// The process this harness started; `None` for an external gateway.
    child: Option<Child>,
    /// The external gateway's process id (see [`Gateway::attack`]).
    external_pid: Option<u32>,
    pub addr: SocketAddr,
    dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The Iggy server behind a bridged gateway; stopped after the gateway.
    iggy: Option<IggyServer>,
}

impl Gateway {
    /// Starts the gateway with `env` on top of a loopback bind address and a log level of
    /// `IGGY_KAFKA_TEST_RUST_LOG` (default `info,kafka_broker=debug`); returns once it
    /// accepts connections.
    pub fn start(env: &[(&str, &str)]) -> Gateway {
        let mut gw = Gateway::spawn(env, true);
        gw.wait_for(
            STARTUP_TIMEOUT,
            "write its listen line",
            |gw| match parse_listen_line(&read_lossy(&gw.stdout)) {
                Some(Ok(addr)) => {
                    gw.addr = addr;
                    true
                }
                Some(Err(e)) => panic!("gateway listen line: {e}\n{}", gw.output(60)),
                None => false,
            },
        );
        let what = format!("accept on {}", gw.addr);
        gw.wait_for(Duration::from_secs(10), &what, |gw| {
            TcpStream::connect_timeout(&gw.addr, Duration::from_millis(500)).is_ok()
        });
        gw
    }

    /// Polls `ready` every 50 ms until it holds; panics with the gateway's output when the
    /// gateway exits first or `timeout` passes (`what` says what it was waited for).
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut ready: impl FnMut(&mut Gateway) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while !ready(self) {
            if let Some(status) = self.exit_status() {
                panic!(
                    "the gateway exited ({status}) before it could {what}\n{}",
                    self.output(60)
                );
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not {what} within {timeout:?}\n{}",
                self.output(60)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the gateway binary with `env` (on top of `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`
    /// when `bind_loopback`) and returns at once; the caller waits for its listeners.
    pub fn spawn(env: &[(&str, &str)], bind_loopback: bool) -> Gateway {
        let dir = scratch_dir("gateway");
        let stdout = dir.join("gateway.stdout");
        let stderr = dir.join("gateway.stderr");
        let out = File::create(&stdout).expect("create gateway stdout file");
        let err = File::create(&stderr).expect("create gateway stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_iggy-gateway-kafka"));
        if bind_loopback {
            cmd.env("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0");
        }
        cmd.current_dir(&dir)
            .env(
                "RUST_LOG",
                std::env::var("IGGY_KAFKA_TEST_RUST_LOG")
                    .unwrap_or_else(|_| "info,kafka_broker=debug".into()),
            )
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the gateway binary");
        Gateway {
            child: Some(child),
            external_pid: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            stdout,
            stderr,
            iggy: None,
        }
    }

    /// The Iggy server behind a gateway started on [`Backend::Iggy`].
    #[allow(dead_code)] // not every test binary stops its server
    pub fn iggy_mut(&mut self) -> Option<&mut IggyServer> {
        self.iggy.as_mut()
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        match &self.child {
            Some(c) => c.id(),
            None => self.external_pid.unwrap_or(0),
        }
    }

    /// Whether this is a gateway the tests did not start (see [`Gateway::attack`]).
    pub fn is_external(&self) -> bool {
        self.child.is_none()
    }

    /// A gateway for an attack test: normally a fresh one started with `env`, like
    /// [`Gateway::start`]. With `IGGY_KAFKA_TEST_GATEWAY=<addr>` and
    /// `IGGY_KAFKA_TEST_GATEWAY_PID=<pid>` set, the attack goes to that running gateway
    /// instead (the soak run, `apps/kafka-bench/soak-under-attack.sh`, attacks the gateway
    /// that serves its load), provided every setting in `env` is among the settings that
    /// gateway was started with (`IGGY_KAFKA_TEST_GATEWAY_SETTINGS`, `KEY=VALUE` separated by
    /// `;`; `RUST_LOG` is not compared); otherwise the test prints `SKIPPED:` and returns
    /// `None`. Memory bounds of such a run come from [`attack::peak_rss_bound_kib`].
    pub fn attack(name: &str, env: &[(&str, &str)]) -> Option<Gateway> {
        let Ok(addr) = std::env::var("IGGY_KAFKA_TEST_GATEWAY") else {
            return Some(Gateway::start(env));
        };
        let addr: SocketAddr = addr
            .parse()
            .unwrap_or_else(|e| panic!("IGGY_KAFKA_TEST_GATEWAY={addr:?}: {e}"));
        let pid: u32 = std::env::var("IGGY_KAFKA_TEST_GATEWAY_PID")
            .ok()
            .and_then(|p| p.parse().ok())
            .expect("IGGY_KAFKA_TEST_GATEWAY_PID must name the external gateway's process");
        let settings = std::env::var("IGGY_KAFKA_TEST_GATEWAY_SETTINGS").unwrap_or_default();
        let has = |k: &str, v: &str| {
            settings
                .split(';')
                .filter_map(|kv| kv.split_once('='))
                .any(|(sk, sv)| sk.trim() == k && sv.trim() == v)
        };
        // The log filter changes no behaviour: the external gateway keeps its own.
        if let Some((k, v)) = env.iter().find(|(k, v)| *k != "RUST_LOG" && !has(k, v)) {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {name}: needs {k}={v}, which the external gateway at {addr} was not started with"
            );
            return None;
        }
        let dir = scratch_dir("external-gateway");
        Some(Gateway {
            child: None,
            external_pid: Some(pid),
            addr,
            stdout: dir.join("none"),
            // The external gateway's log, when the soak run names it.
            stderr: std::env::var_os("IGGY_KAFKA_TEST_GATEWAY_LOG")
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join("none")),
            dir,
            iggy: None,
        })
    }

    /// Whether the gateway process is still running.
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// How the gateway exited, if it has.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        match &mut self.child {
            Some(c) => c.try_wait().ok().flatten(),
            None => {
                let alive = Path::new(&format!("/proc/{}", self.pid())).exists();
                // An external gateway that is gone counts as exited (the status is unknown).
                (!alive).then(|| {
                    use std::os::unix::process::ExitStatusExt;
                    ExitStatus::from_raw(0)
                })
            }
        }
    }

    /// The gateway's stdout and the last `lines` lines of its log (stderr).
    pub fn output(&self, lines: usize) -> String {
        format!(
            "--- gateway stdout ---\n{}\n--- gateway log (last {lines} lines) ---\n{}",
            tail(&read_lossy(&self.stdout), 5),
            tail(&read_lossy(&self.stderr), lines)
        )
    }

    /// The lines of the gateway's log (stderr) that contain `needle`.
    pub fn log_matching(&self, needle: &str) -> Vec<String> {
        read_lossy(&self.stderr)
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            // A failing test's gateway logs stay for a look.
            let _ = writeln!(
                std::io::stderr(),
                "gateway {} log kept in {}",
                self.addr,
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
        drop(self.iggy.take());
    }
}

/// Which store the gateway under test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded in-memory store (the default).
    Memory,
    /// A real Apache Iggy server through the bridge. Needs `IGGY_SERVER_BIN`, the path of
    /// an `iggy-server` binary; without it the test prints `SKIPPED:` and passes, with it
    /// a server that does not start fails the test.
    Iggy,
}

/// The `iggy-server` binary named by `IGGY_SERVER_BIN`, or `None` after printing
/// `SKIPPED: <name> on Iggy: IGGY_SERVER_BIN not set`. A server that is named but does not
/// start fails the test (see the `test-support` crate).
pub fn iggy_server_bin(name: &str) -> Option<PathBuf> {
    test_support::iggy_server_bin(&format!("{name} on Iggy"))
}

/// The meta secret of the test gateways (every gateway on one Iggy shares it).
pub const TEST_META_SECRET: &str = "test-gateways-meta-secret-0123456789abcdef";

/// The gateway settings that point the bridge at `iggy`, with the meta secret that
/// gateways with authentication must have.
pub fn bridge_env(iggy: &IggyServer) -> Vec<(&'static str, String)> {
    vec![
        ("IGGY_KAFKA_BRIDGE_ENABLED", "true".into()),
        ("IGGY_KAFKA_IGGY_META_SECRET", TEST_META_SECRET.into()),
        ("IGGY_KAFKA_IGGY_ADDR", iggy.address.clone()),
        ("IGGY_KAFKA_IGGY_USERNAME", test_support::IGGY_USER.into()),
        (
            "IGGY_KAFKA_IGGY_PASSWORD",
            test_support::IGGY_PASSWORD.into(),
        ),
    ]
}

impl Gateway {
    /// Starts the gateway on `backend`; `None` when the backend is not available here
    /// (the reason is printed).
    pub fn start_on(backend: Backend, name: &str, env: &[(&str, &str)]) -> Option<Gateway> {
        match backend {
            Backend::Memory => Some(Gateway::start(env)),
            Backend::Iggy => {
                let bin = iggy_server_bin(name)?;
                let iggy = IggyServer::start(&bin);
                let bridge = bridge_env(&iggy);
                let mut all: Vec<(&str, &str)> =
                    bridge.iter().map(|(k, v)| (*k, v.as_str())).collect();
                all.extend_from_slice(env);
                let mut gw = Gateway::start(&all);
                gw.iggy = Some(iggy);
                Some(gw)
            }
        }
    }
}

/// A client run in its own process group, so that a timeout kills it and everything it
/// started (a consumer subprocess, the kcat children of a shell script, the JVM's children).
struct Script {
    child: Child,
}

impl Drop for Script {
    fn drop(&mut self) {
        // The whole group, also when the script itself has exited: processes it started
        // and left behind (a flooder, a consumer subprocess) must not outlive the test.
        let pgid = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &pgid])
            .stderr(Stdio::null())
            .status();
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// How a client script is run.
#[derive(Clone, Copy, Debug)]
pub enum Client {
    /// `.clients/venv/bin/python <script>`; the module that must import.
    Python { module: &'static str },
    /// `.clients/venv-apps/bin/python <script>`: the stream-processing programs' own venv
    /// (they pin client versions of their own); the module that must import.
    PythonApps { module: &'static str },
    /// `node <script>` with `NODE_PATH=.clients/node/node_modules`.
    Node,
    /// `java -cp '.clients/java/jars/*' <Script>.java`.
    Java,
    /// `bash <script>`, for the kcat scripts; `needs_librdkafka216` when the script runs kcat
    /// on `.clients/librdkafka216/librdkafka.so.1`.
    Shell { needs_librdkafka216: bool },
}

pub fn clients_required() -> bool {
    std::env::var("KAFKA_CLIENTS_REQUIRED").is_ok_and(|v| v == "1")
}

fn works(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why `client` cannot run here, if it cannot.
pub fn missing(root: &Path, client: Client) -> Option<String> {
    let clients = root.join(".clients");
    match client {
        Client::Python { module } | Client::PythonApps { module } => {
            let venv = match client {
                Client::PythonApps { .. } => "venv-apps",
                _ => "venv",
            };
            let py = clients.join(venv).join("bin/python");
            if !py.exists() {
                return Some(format!("{} missing", py.display()));
            }
            (!works(Command::new(&py).args(["-c", &format!("import {module}")])))
                .then(|| format!("python module {module} missing in {}", py.display()))
        }
        Client::Node => {
            let pkg = clients.join("node/node_modules/kafkajs/package.json");
            if !pkg.exists() {
                return Some(format!("{} missing", pkg.display()));
            }
            (!works(Command::new("node").arg("--version"))).then(|| "node not on PATH".into())
        }
        Client::Java => {
            let jars = clients.join("java/jars");
            let has_jar = fs::read_dir(&jars).is_ok_and(|mut d| {
                d.any(|e| {
                    e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("kafka-clients"))
                })
            });
            if !has_jar {
                return Some(format!("no kafka-clients jar in {}", jars.display()));
            }
            (!works(Command::new("java").arg("-version"))).then(|| "java not on PATH".into())
        }
        Client::Shell {
            needs_librdkafka216,
        } => {
            if !works(Command::new("kcat").arg("-V")) {
                return Some("kcat not on PATH".into());
            }
            let so = clients.join("librdkafka216/librdkafka.so.1");
            (needs_librdkafka216 && !so.exists()).then(|| format!("{} missing", so.display()))
        }
    }
}

/// `true` when the test may go on; otherwise it has printed the `SKIPPED:` line. Panics
/// when the client is missing and `KAFKA_CLIENTS_REQUIRED=1`.
pub fn require(name: &str, client: Client) -> bool {
    let Some(why) = missing(&repo_root(), client) else {
        return true;
    };
    assert!(
        !clients_required(),
        "{name} is not installed ({why}) and KAFKA_CLIENTS_REQUIRED=1"
    );
    // straight to the process's stderr: visible even when the harness captures output
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {name} not installed (run scripts/test.sh): {why}"
    );
    false
}

/// Runs `script` (a path relative to the repository root) with `client` against a fresh
/// gateway started with `gateway_env`, with `BOOTSTRAP` and a unique `TOPIC_PREFIX`. Passes
/// when it exits 0 within `timeout`; otherwise panics with its output and the gateway log.
/// Skips (see [`require`]) when the client is not installed.
pub fn run_script(
    name: &str,
    client: Client,
    script: &str,
    gateway_env: &[(&str, &str)],
    timeout: Duration,
) {
    run_script_on(Backend::Memory, name, client, script, gateway_env, timeout);
}

/// [`run_script`] against a gateway on `backend`.
pub fn run_script_on(
    backend: Backend,
    name: &str,
    client: Client,
    script: &str,
    gateway_env: &[(&str, &str)],
    timeout: Duration,
) {
    if !require(name, client) {
        return;
    }
    let Some(gateway) = Gateway::start_on(backend, name, gateway_env) else {
        return;
    };
    run_against(
        &gateway,
        name,
        client,
        script,
        &[],
        &topic_prefix(name),
        timeout,
    );
}

/// Runs `script` with `client` against a running `gateway`, with `BOOTSTRAP`, the given
/// `TOPIC_PREFIX` and `env`; panics with its output and the gateway log unless it exits 0
/// within `timeout`. The caller has checked that the client is installed.
pub fn run_against(
    gateway: &Gateway,
    name: &str,
    client: Client,
    script: &str,
    env: &[(&str, &str)],
    prefix: &str,
    timeout: Duration,
) {
    run_against_all(&[gateway], name, client, script, env, prefix, timeout);
}

/// [`run_against`] with several gateways: `BOOTSTRAP` is every gateway's address,
/// separated by commas (each client script takes such a list), and a failure shows the
/// log of each.
pub fn run_against_all(
    gateways: &[&Gateway],
    name: &str,
    client: Client,
    script: &str,
    env: &[(&str, &str)],
    prefix: &str,
    timeout: Duration,
) {
    let bootstrap = gateways
        .iter()
        .map(|g| g.addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let dir = scratch_dir("client");
    let out_path = dir.join("client.log");
    let out = File::create(&out_path).expect("create client log");
    let mut cmd = client_command(client, script);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("BOOTSTRAP", &bootstrap)
        .env("TOPIC_PREFIX", prefix)
        .stdout(Stdio::from(out.try_clone().expect("clone log handle")))
        .stderr(Stdio::from(out));
    let started = Instant::now();
    let mut child = Script {
        child: cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({script}): {e}")),
    };
    let status = loop {
        if let Some(status) = child.child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(child); // on timeout: kill the whole process group
    let elapsed = started.elapsed();
    let output = read_lossy(&out_path);
    let _ = fs::remove_dir_all(&dir);
    // captured by the harness; shown with --nocapture or when the test fails
    println!(
        "--- {script} ({name}) against the gateway on {bootstrap} in {elapsed:.1?} ---\n{output}"
    );
    let verdict = match status {
        Some(s) if s.success() => return,
        Some(s) => format!("{name}: {script} failed ({s}) after {elapsed:.1?}"),
        None => format!("{name}: {script} did not finish within {timeout:?} (killed)"),
    };
    // One gateway: its last 120 log lines; several: the last 80 of each.
    let lines = if gateways.len() > 1 { 80 } else { 120 };
    let logs: Vec<String> = gateways
        .iter()
        .map(|g| format!("=== gateway on {} ===\n{}", g.addr, g.output(lines)))
        .collect();
    panic!(
        "{verdict} against the gateway on {bootstrap}.\n--- client output (last lines; all of it above) ---\n{}\n{}",
        tail(&output, 40),
        logs.join("\n")
    );
}

/// The command that runs `script` (a path relative to the repository root) with `client`
/// from the repository root, in its own process group, with stdin closed.
fn client_command(client: Client, script: &str) -> Command {
    let root = repo_root();
    let path = root.join(script);
    let mut cmd = match client {
        Client::Python { .. } | Client::PythonApps { .. } => {
            let venv = match client {
                Client::PythonApps { .. } => ".clients/venv-apps/bin/python",
                _ => ".clients/venv/bin/python",
            };
            let mut c = Command::new(root.join(venv));
            c.arg(&path).env("PYTHONUNBUFFERED", "1");
            c
        }
        Client::Node => {
            let mut c = Command::new("node");
            c.arg(&path)
                .env("NODE_PATH", root.join(".clients/node/node_modules"));
            c
        }
        Client::Java => {
            let mut c = Command::new("java");
            c.arg("-cp")
                .arg(format!("{}/*", root.join(".clients/java/jars").display()))
                .arg(&path);
            c
        }
        Client::Shell { .. } => {
            let mut c = Command::new("bash");
            c.arg(&path);
            c
        }
    };
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd.current_dir(&root).stdin(Stdio::null());
    cmd
}

/// A client script running in the background (see [`Background::spawn`]); its whole
/// process group is killed on drop.
pub struct Background {
    script: Script,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Background {
    /// Starts `script` with `client`, `BOOTSTRAP=bootstrap` and `env`, its output to `log`,
    /// and returns at once.
    pub fn spawn(
        (client, script): (Client, &str),
        bootstrap: &str,
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> Background {
        let out = File::create(&log).expect("create client log");
        let mut cmd = client_command(client, script);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env("BOOTSTRAP", bootstrap)
            .stdout(Stdio::from(out.try_clone().expect("clone log handle")))
            .stderr(Stdio::from(out));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {script}: {e}"));
        Background {
            script: Script { child },
            log,
        }
    }

    /// How it exited, if it has.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.script.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout` for it to exit; `None` if it is still running.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exit_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last `lines` lines of its output.
    pub fn output(&self, lines: usize) -> String {
        tail(&read_lossy(&self.log), lines)
    }
}
