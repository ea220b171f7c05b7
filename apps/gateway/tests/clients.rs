//! Real Kafka clients against the gateway binary.
//!
//! One test per client suite in `tests/clients/` (see the header of each script for what it
//! covers). Each test starts the gateway with `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`, reads the
//! bound address from its log, runs the suite with `BOOTSTRAP` and a unique `TOPIC_PREFIX`
//! (timeout 120 s) and stops the gateway again, also when the test fails.
//!
//! The clients are installed by `scripts/install-clients.sh` into `.clients/` (run by
//! `scripts/test.sh`). A client that is not installed is skipped with a `SKIPPED:` line,
//! unless `KAFKA_CLIENTS_REQUIRED=1`, which turns a missing client into a failure.
//!
//! `CLIENT_SUITE_KEEP_GOING=1` (passed through to the suites) makes a suite report every
//! mismatch instead of stopping at the first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A fresh scratch directory under the system temp dir (removed by its owner's Drop).
fn scratch_dir(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "iggy-gateway-kafka-{what}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

fn read_lossy(path: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The bound address from the gateway's listen line: the first line of its standard output,
/// `listening on <BOUND_ADDR> advertised <HOST>:<PORT>` (see apps/gateway/src/main.rs).
/// `None` until a complete first line is there; `Err` when that line is not a listen line.
fn parse_listen_line(stdout: &str) -> Option<Result<SocketAddr, String>> {
    let (line, _) = stdout.split_once('\n')?;
    let parsed = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_once(" advertised "))
        .filter(|(_, adv)| !adv.is_empty() && !adv.contains(' '))
        .and_then(|(bound, _)| bound.parse::<SocketAddr>().ok())
        .filter(|a| a.port() != 0);
    Some(parsed.ok_or_else(|| format!("unexpected first stdout line: {line:?}")))
}

/// The gateway binary on a random loopback port; killed (and its scratch dir removed) on drop.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Gateway {
    fn start(extra_env: &[(&str, &str)]) -> Gateway {
        let dir = scratch_dir("gateway");
        let stdout = dir.join("gateway.stdout");
        let stderr = dir.join("gateway.stderr");
        let out = File::create(&stdout).expect("create gateway stdout file");
        let err = File::create(&stderr).expect("create gateway stderr file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_iggy-gateway-kafka"));
        cmd.current_dir(&dir)
            .env("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")
            .env(
                "RUST_LOG",
                std::env::var("IGGY_KAFKA_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn the gateway binary");
        let mut gw = Gateway {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            stdout,
            stderr,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match parse_listen_line(&read_lossy(&gw.stdout)) {
                Some(Ok(addr)) => {
                    gw.addr = addr;
                    break;
                }
                Some(Err(e)) => panic!("gateway listen line: {e}\n{}", gw.output()),
                None => {}
            }
            if let Ok(Some(status)) = gw.child.try_wait() {
                panic!(
                    "the gateway exited ({status}) before writing its listen line \
                     (`listening on <addr> advertised <host:port>` on stdout)\n{}",
                    gw.output()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "the gateway wrote no listen line within {STARTUP_TIMEOUT:?}\n{}",
                    gw.output()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // the listener must really accept before a client is pointed at it
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&gw.addr, Duration::from_millis(500)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the gateway does not accept on {}",
                gw.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        gw
    }

    /// The last lines of the gateway's stdout and stderr, for failure messages.
    fn output(&self) -> String {
        format!(
            "--- gateway stdout ---\n{}\n--- gateway stderr (last lines) ---\n{}",
            tail(&read_lossy(&self.stdout), 5),
            tail(&read_lossy(&self.stderr), 60)
        )
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A client suite running in its own process group, so that a timeout kills the client and
/// everything it started (kcat children of a shell script, the JVM, ...).
struct Script {
    child: Child,
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pgid = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &pgid]).status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

enum Client {
    Python(&'static str),
    Node(&'static str),
    Java(&'static str),
    Shell(&'static str),
}

fn required() -> bool {
    std::env::var("KAFKA_CLIENTS_REQUIRED").is_ok_and(|v| v == "1")
}

fn works(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why the client cannot run here, if it cannot.
fn missing(root: &Path, name: &str, client: &Client) -> Option<String> {
    let clients = root.join(".clients");
    match client {
        Client::Python(_) => {
            let py = clients.join("venv/bin/python");
            let module = match name {
                "confluent-kafka" => "confluent_kafka",
                "kafka-python" => "kafka",
                _ => "aiokafka",
            };
            if !py.exists() {
                return Some(format!("{} missing", py.display()));
            }
            (!works(Command::new(&py).args(["-c", &format!("import {module}")])))
                .then(|| format!("python module {module} missing in {}", py.display()))
        }
        Client::Node(_) => {
            let pkg = clients.join("node/node_modules/kafkajs/package.json");
            if !pkg.exists() {
                return Some(format!("{} missing", pkg.display()));
            }
            (!works(Command::new("node").arg("--version"))).then(|| "node not on PATH".into())
        }
        Client::Java(_) => {
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
        Client::Shell(_) => {
            if !works(Command::new("kcat").arg("-V")) {
                return Some("kcat not on PATH".into());
            }
            let so = clients.join("librdkafka216/librdkafka.so.1");
            (name.ends_with("2.16") && !so.exists()).then(|| format!("{} missing", so.display()))
        }
    }
}

fn run_client(name: &str, client: Client) {
    let root = repo_root();
    if let Some(why) = missing(&root, name, &client) {
        if required() {
            panic!("{name} is not installed ({why}) and KAFKA_CLIENTS_REQUIRED=1");
        }
        // straight to the process's stderr: visible even when the test harness captures output
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {name} not installed (run scripts/test.sh): {why}"
        );
        return;
    }

    // kcat has no admin API: its topic is auto-created, with 3 partitions like the others
    let gateway = match client {
        Client::Shell(_) => Gateway::start(&[("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "3")]),
        _ => Gateway::start(&[]),
    };
    let dir = scratch_dir("client");
    let out_path = dir.join("client.log");
    let out = File::create(&out_path).expect("create client log");
    let suites = root.join("tests/clients");
    let mut cmd = match &client {
        Client::Python(script) => {
            let mut c = Command::new(root.join(".clients/venv/bin/python"));
            c.arg(suites.join(script));
            c
        }
        Client::Node(script) => {
            let mut c = Command::new("node");
            c.arg(suites.join(script))
                .env("NODE_PATH", root.join(".clients/node/node_modules"));
            c
        }
        Client::Java(script) => {
            let mut c = Command::new("java");
            c.arg("-cp")
                .arg(format!("{}/*", root.join(".clients/java/jars").display()))
                .arg(suites.join(script));
            c
        }
        Client::Shell(script) => {
            let mut c = Command::new("bash");
            c.arg(suites.join(script));
            c
        }
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let prefix = format!("it-{}-{}", std::process::id(), nanos % 1_000_000_000_000);
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd.current_dir(&root)
        .env("BOOTSTRAP", gateway.addr.to_string())
        .env("TOPIC_PREFIX", &prefix)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().expect("clone log handle")))
        .stderr(Stdio::from(out));
    let started = Instant::now();
    let mut script = Script {
        child: cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}")),
    };
    let status = loop {
        if let Some(status) = script.child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if started.elapsed() > SCRIPT_TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(script); // on timeout: kill the whole process group
    let output = read_lossy(&out_path);
    let _ = fs::remove_dir_all(&dir);
    println!(
        "--- {name} against the gateway on {} ---\n{output}",
        gateway.addr
    );
    let verdict = match status {
        Some(s) if s.success() => return,
        Some(s) => format!("{name} failed ({s})"),
        None => format!("{name} did not finish within {SCRIPT_TIMEOUT:?} (killed)"),
    };
    panic!(
        "{verdict} against the gateway on {}.\n--- {name} output (last lines; all of it above) ---\n{}\n{}",
        gateway.addr,
        tail(&output, 25),
        gateway.output()
    );
}

#[test]
fn confluent_kafka() {
    run_client(
        "confluent-kafka",
        Client::Python("confluent_kafka_suite.py"),
    );
}

#[test]
fn kafka_python() {
    run_client("kafka-python", Client::Python("kafka_python_suite.py"));
}

#[test]
fn aiokafka() {
    run_client("aiokafka", Client::Python("aiokafka_suite.py"));
}

#[test]
fn kafkajs() {
    run_client("kafkajs", Client::Node("kafkajs_suite.js"));
}

#[test]
fn java_kafka_clients() {
    run_client("java kafka-clients", Client::Java("JavaSuite.java"));
}

#[test]
fn kcat_librdkafka_2_0_2() {
    run_client(
        "kcat on librdkafka 2.0.2",
        Client::Shell("kcat_librdkafka_2_0_2.sh"),
    );
}

#[test]
fn kcat_librdkafka_2_16() {
    run_client(
        "kcat on librdkafka 2.16",
        Client::Shell("kcat_librdkafka_2_16.sh"),
    );
}

#[test]
fn listen_line_parsing() {
    let ok = |s: &str| parse_listen_line(s).and_then(Result::ok);
    assert_eq!(
        ok("listening on 127.0.0.1:40123 advertised 127.0.0.1:40123\n"),
        Some(SocketAddr::from(([127, 0, 0, 1], 40123)))
    );
    assert_eq!(
        ok("listening on [::1]:9 advertised [::1]:9\nmore"),
        Some("[::1]:9".parse().unwrap())
    );
    assert!(
        parse_listen_line("listening on 127.0.0.1:40123 adv").is_none(),
        "incomplete line"
    );
    assert!(matches!(parse_listen_line("hello\n"), Some(Err(_))));
    assert!(matches!(
        parse_listen_line("listening on 127.0.0.1:0 advertised h:1\n"),
        Some(Err(_))
    ));
}
