//! The binary as an operator meets it: command line, configuration errors, the listen line
//! and signals.
//!
//! Every gateway is started with a cleared environment, so `IGGY_KAFKA_*` variables of the
//! shell running the tests cannot change the outcome.

// Helpers outside `#[test]` functions are test code too; clippy.toml's test allowance does
// not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_iggy-gateway-kafka");
const TIMEOUT: Duration = Duration::from_secs(20);

fn gateway() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs a gateway expected to stop on its own (bad configuration, `--help`).
fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = gateway()
        .args(args)
        .envs(env.iter().copied())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut child).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("gateway with {args:?} {env:?} did not exit within {TIMEOUT:?}");
    });
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn wait_with_timeout(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Asserts a configuration error: exit code 2, one line on stderr containing `needles`.
fn assert_config_error(args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let out = run_to_end(args, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
    assert!(out.stdout.is_empty(), "nothing may reach stdout: {out:?}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr}"
    );
    assert!(
        stderr.starts_with("iggy-gateway-kafka: invalid configuration: "),
        "{stderr}"
    );
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
}

/// A gateway that is serving.
struct Running {
    child: Child,
    stdout: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Running {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut child = gateway()
            .args(args)
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let (tx, stdout) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = Some(thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        }));
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Reads the listen line: `listening on <BOUND_ADDR> advertised <HOST>:<PORT>`.
    fn listen_line(&mut self) -> (SocketAddr, String) {
        let line = match self.stdout.recv_timeout(TIMEOUT) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.child.kill();
                panic!("no listen line ({e}); stderr:\n{}", self.stderr_text());
            }
        };
        let rest = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first stdout line: {line:?}"));
        let (bound, advertised) = rest
            .split_once(" advertised ")
            .unwrap_or_else(|| panic!("unexpected listen line: {line:?}"));
        assert!(!advertised.contains(' '), "{line:?}");
        (bound.parse().unwrap(), advertised.to_string())
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the exit and returns the status with everything logged to stderr.
    fn wait(&mut self) -> (ExitStatus, String) {
        let status = wait_with_timeout(&mut self.child).unwrap_or_else(|| {
            let _ = self.child.kill();
            panic!("gateway did not exit within {TIMEOUT:?}");
        });
        (status, self.stderr_text())
    }

    fn stderr_text(&mut self) -> String {
        self.stderr
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default()
    }

    /// Lines written to stdout after the listen line (one per listener).
    fn more_stdout(&self) -> Vec<String> {
        self.stdout.try_iter().collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn write_toml(dir: &Path, contents: &str) -> String {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn help_exits_zero() {
    let out = run_to_end(&["--help"], &[]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Usage: iggy-gateway-kafka"), "{stdout}");
    assert!(stdout.contains("--config <FILE>"), "{stdout}");
    assert!(stdout.contains("IGGY_KAFKA_CONFIG"), "{stdout}");
}

#[test]
fn version_exits_zero() {
    let out = run_to_end(&["--version"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("iggy-gateway-kafka {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_option_is_a_usage_error() {
    let out = run_to_end(&["--no-such-option"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn non_numeric_value_names_the_variable() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_MAX_CONNECTIONS", "abc")],
        &["IGGY_KAFKA_MAX_CONNECTIONS=\"abc\"", "invalid digit"],
    );
}

#[test]
fn out_of_range_value_names_the_variable() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "0")],
        &["IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS=\"0\""],
    );
}

#[test]
fn wildcard_bind_needs_an_advertised_host() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_BIND_ADDR", "0.0.0.0:0")],
        &["IGGY_KAFKA_BIND_ADDR", "IGGY_KAFKA_ADVERTISED_HOST"],
    );
}

#[test]
fn the_bridge_needs_a_password() {
    assert_config_error(
        &[],
        &[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_ADDR", "127.0.0.1:8090"),
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
        ],
        &["IGGY_KAFKA_IGGY_PASSWORD", "is required", "no default"],
    );
}

#[test]
fn missing_config_file_is_refused() {
    assert_config_error(
        &["--config", "/nonexistent/iggy-gateway-kafka.toml"],
        &[],
        &["cannot read config file /nonexistent/iggy-gateway-kafka.toml"],
    );
}

#[test]
fn bad_file_value_names_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_toml(dir.path(), "max_connections = 0\n");
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_CONFIG", &path)],
        &[&format!("max_connections in {path}"), "at least 1"],
    );
}

#[test]
fn file_is_read_and_environment_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_toml(
        dir.path(),
        r#"
        bind_addr = "127.0.0.1:0"
        advertised_host = "file.example"
        advertised_port = 19999
        "#,
    );

    // From the file alone, named on the command line.
    let mut gw = Running::start(&["--config", &path], &[]);
    let (bound, advertised) = gw.listen_line();
    assert_eq!(bound.ip().to_string(), "127.0.0.1");
    assert_ne!(bound.port(), 0);
    assert_eq!(advertised, "file.example:19999");
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("configuration file read"), "{stderr}");

    // The file named by IGGY_KAFKA_CONFIG, one value overridden from the environment.
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_CONFIG", &path),
            ("IGGY_KAFKA_ADVERTISED_HOST", "env.example"),
        ],
    );
    let (_, advertised) = gw.listen_line();
    assert_eq!(advertised, "env.example:19999");
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn listens_on_a_picked_port_and_stops_on_sigterm() {
    let mut gw = Running::start(&[], &[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")]);
    let (bound, advertised) = gw.listen_line();
    assert_eq!(bound.ip().to_string(), "127.0.0.1");
    assert_ne!(bound.port(), 0);
    // The real port is what clients are told.
    assert_eq!(advertised, bound.to_string());
    TcpStream::connect_timeout(&bound, TIMEOUT).expect("the announced port accepts");

    let sent = Instant::now();
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "slow shutdown: {:?}",
        sent.elapsed()
    );
    assert!(stderr.contains("data is kept in memory only"), "{stderr}");
    assert!(stderr.contains("WARN"), "{stderr}");
    // Then one line per listener, and nothing else.
    assert_eq!(
        gw.more_stdout(),
        [format!(
            "listener PLAINTEXT PLAINTEXT on {bound} advertised {bound}"
        )]
    );
}

/// The ready line states the worker count the runtime really has.
fn ready_workers(env: &[(&str, &str)]) -> usize {
    let mut all = vec![("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")];
    all.extend_from_slice(env);
    let mut gw = Running::start(&[], &all);
    gw.listen_line();
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let ready = stderr
        .lines()
        .find(|l| l.contains("gateway ready"))
        .unwrap_or_else(|| panic!("no ready line: {stderr}"));
    let (_, rest) = ready
        .split_once("worker_threads=")
        .unwrap_or_else(|| panic!("no worker count: {ready}"));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[test]
fn worker_threads_are_one_per_core_unless_set() {
    let cores = thread::available_parallelism().unwrap().get();
    assert_eq!(ready_workers(&[]), cores);
    assert_eq!(ready_workers(&[("IGGY_KAFKA_WORKER_THREADS", "1")]), 1);
    assert_eq!(ready_workers(&[("IGGY_KAFKA_WORKER_THREADS", "3")]), 3);
}

#[test]
fn too_many_worker_threads_is_a_configuration_error() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_WORKER_THREADS", "100000")],
        &["IGGY_KAFKA_WORKER_THREADS", "1024"],
    );
}

#[test]
fn stops_on_sigint() {
    let mut gw = Running::start(&[], &[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")]);
    gw.listen_line();
    gw.signal("INT");
    let (status, stderr) = gw.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn listen_line_does_not_depend_on_the_log_filter() {
    let mut gw = Running::start(
        &[],
        &[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"), ("RUST_LOG", "off")],
    );
    let (bound, _) = gw.listen_line();
    assert_ne!(bound.port(), 0);
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_LOG_FORMAT", "json"),
        ],
    );
    gw.listen_line();
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    let mut messages = Vec::new();
    for line in stderr.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{stderr}"));
        let level = event["level"].as_str();
        assert!(
            matches!(level, Some("ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE")),
            "{line}"
        );
        let message = event["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no message: {line}"));
        messages.push(message.to_string());
    }
    // The same events as in text: the in-memory warning, readiness and the stop.
    assert!(
        messages
            .iter()
            .any(|m| m.contains("data is kept in memory only")),
        "{stderr}"
    );
    assert!(messages.iter().any(|m| m == "gateway ready"), "{stderr}");
    assert!(messages.iter().any(|m| m == "stopped"), "{stderr}");
}

#[test]
fn unknown_log_format_is_a_configuration_error() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_LOG_FORMAT", "xml")],
        &["IGGY_KAFKA_LOG_FORMAT=\"xml\"", "text or json"],
    );
}

#[test]
fn bad_metrics_address_is_a_configuration_error() {
    assert_config_error(
        &[],
        &[("IGGY_KAFKA_METRICS_ADDR", "localhost:9100")],
        &["IGGY_KAFKA_METRICS_ADDR=\"localhost:9100\"", "IP:PORT"],
    );
}

#[test]
fn unknown_variables_are_logged_not_fatal() {
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            // What Kubernetes injects for a Service named `iggy-kafka`.
            ("IGGY_KAFKA_PORT", "tcp://10.0.0.1:9093"),
        ],
    );
    gw.listen_line();
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("IGGY_KAFKA_PORT is not a setting of this gateway"),
        "{stderr}"
    );
}

#[test]
fn port_in_use_exits_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run_to_end(&[], &[("IGGY_KAFKA_BIND_ADDR", &addr)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot bind IGGY_KAFKA_BIND_ADDR={addr}")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no listen line without a listener");
}

/// Runs `users ...` with `stdin` as its standard input.
fn users(args: &[&str], stdin: &str) -> (Option<i32>, String) {
    use std::io::Write as _;
    let mut child = gateway()
        .arg("users")
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let status = wait_with_timeout(&mut child).expect("users command exits");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

#[test]
fn users_commands_keep_hashes_in_the_users_file() {
    let dir = test_support::scratch_dir("cli-users");
    let file = dir.join("users.json");
    let path = file.to_str().unwrap();

    let (code, stderr) = users(&["set-password", "--file", path, "alice"], "s3cret pass\n");
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = users(
        &[
            "set-scram",
            "--file",
            path,
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "4096",
            "bob",
        ],
        "other-secret\r\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("alice") && text.contains("bob"), "{text}");
    assert!(
        !text.contains("s3cret") && !text.contains("other-secret"),
        "{text}"
    );
    assert!(!stderr.contains("other-secret"), "{stderr}");

    // Bad input: exit 2, the file unchanged.
    for (args, stdin) in [
        (vec!["set-password", "--file", path, "carol"], ""),
        (vec!["set-password", "--file", path, "carol"], "\n"),
        (
            vec!["set-scram", "--file", path, "--mechanism", "MD5", "carol"],
            "pw\n",
        ),
    ] {
        let (code, stderr) = users(&args, stdin);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    let (code, stderr) = users(&["delete", "--file", path, "alice"], "");
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("alice") && text.contains("bob"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mixing_listener_styles_or_sasl_without_users_is_refused() {
    for (env, expected) in [
        (
            vec![
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:0"),
                ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ],
            "IGGY_KAFKA_BIND_ADDR=\"127.0.0.1:0\": cannot be combined with IGGY_KAFKA_LISTENERS",
        ),
        (
            vec![("IGGY_KAFKA_SASL_ENABLED", "true")],
            "IGGY_KAFKA_SASL_USERS_FILE (default): ",
        ),
    ] {
        let out = run_to_end(&[], &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// A Metadata v12 request over `stream`; the advertised broker address of the answer.
fn metadata_broker(stream: &mut (impl Read + std::io::Write)) -> String {
    use kafka_protocol::api::{decode_response, encode_request};
    use kafka_protocol::messages::metadata_request::MetadataRequest;
    use kafka_protocol::messages::request_header::RequestHeader;
    use kafka_protocol::{RequestBody, ResponseBody};
    let body: RequestBody = MetadataRequest::default().into();
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: 12,
        correlation_id: 1,
        ..Default::default()
    };
    stream
        .write_all(&encode_request(&header, &body).unwrap())
        .unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut buf = vec![0u8; usize::try_from(i32::from_be_bytes(size)).unwrap()];
    stream.read_exact(&mut buf).unwrap();
    match decode_response(body.api_key(), 12, &bytes::Bytes::from(buf))
        .unwrap()
        .1
    {
        ResponseBody::Metadata(m) => format!("{}:{}", m.brokers[0].host, m.brokers[0].port),
        other => panic!("{other:?}"),
    }
}

#[test]
fn serves_a_plaintext_and_an_ssl_listener_each_with_its_address() {
    use rustls::pki_types::{CertificateDer, ServerName};
    let dir = test_support::scratch_dir("cli-tls");
    let ca = test_support::certs::TestCa::default();
    let files = ca.write_server_files(&dir);
    let metrics = format!("127.0.0.1:{}", test_support::free_port());
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_METRICS_ADDR", &metrics),
            (
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:0",
            ),
            ("IGGY_KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "SECURE:SSL"),
            (
                "IGGY_KAFKA_ADVERTISED_LISTENERS",
                "SECURE://localhost:19094",
            ),
            ("IGGY_KAFKA_TLS_CERT_FILE", files.cert.to_str().unwrap()),
            ("IGGY_KAFKA_TLS_KEY_FILE", files.key.to_str().unwrap()),
        ],
    );
    let (plain, advertised) = gw.listen_line();
    assert_eq!(advertised, plain.to_string());
    let lines: Vec<String> = (0..2)
        .map(|_| gw.stdout.recv_timeout(TIMEOUT).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        format!("listener PLAINTEXT PLAINTEXT on {plain} advertised {plain}")
    );
    let secure: SocketAddr = lines[1]
        .strip_prefix("listener SECURE SSL on ")
        .and_then(|rest| rest.strip_suffix(" advertised localhost:19094"))
        .unwrap_or_else(|| panic!("{lines:?}"))
        .parse()
        .unwrap();

    let mut tcp = TcpStream::connect(plain).unwrap();
    assert_eq!(metadata_broker(&mut tcp), plain.to_string());

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        std::sync::Arc::new(config),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let tcp = TcpStream::connect(secure).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    assert_eq!(metadata_broker(&mut tls), "localhost:19094");

    // Plaintext on the TLS port: closed, not answered.
    let mut wrong = TcpStream::connect(secure).unwrap();
    wrong.set_read_timeout(Some(TIMEOUT)).unwrap();
    std::io::Write::write_all(
        &mut wrong,
        &[0, 0, 0, 12, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
    )
    .unwrap();
    let mut buf = [0u8; 16];
    assert!(matches!(wrong.read(&mut buf), Ok(0) | Err(_)));
    // Counted (right after the close) in the TLS metrics.
    let expected = "kafka_gateway_tls_handshake_failures_total{reason=\"not_tls\"} 1";
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut http = TcpStream::connect(&metrics).unwrap();
        std::io::Write::write_all(&mut http, b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut scrape = String::new();
        http.read_to_string(&mut scrape).unwrap();
        if scrape.contains(expected) {
            break;
        }
        assert!(Instant::now() < deadline, "{scrape}");
        thread::sleep(Duration::from_millis(50));
    }

    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sasl_ssl_with_the_users_file_of_the_cli() {
    use rustls::pki_types::{CertificateDer, ServerName};
    use test_support::sasl_client::{AuthOutcome, Flow, SaslClient, ScramHash};
    let dir = test_support::scratch_dir("cli-sasl-ssl");
    let ca = test_support::certs::TestCa::default();
    let files = ca.write_server_files(&dir);
    let users_file = dir.join("users.json");
    let path = users_file.to_str().unwrap();
    assert_eq!(
        users(&["set-password", "--file", path, "alice"], "alice-pw\n").0,
        Some(0)
    );
    assert_eq!(
        users(
            &["set-scram", "--file", path, "--iterations", "4096", "bob"],
            "bob-pw\n"
        )
        .0,
        Some(0)
    );
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ("IGGY_KAFKA_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_SASL_USERS_FILE", path),
            ("IGGY_KAFKA_SASL_FAILURE_DELAY_MS", "10"),
            ("IGGY_KAFKA_SASL_FAILURE_DELAY_MAX_MS", "50"),
            ("IGGY_KAFKA_TLS_CERT_FILE", files.cert.to_str().unwrap()),
            ("IGGY_KAFKA_TLS_KEY_FILE", files.key.to_str().unwrap()),
        ],
    );
    let (bound, _) = gw.listen_line();
    assert_eq!(
        gw.stdout.recv_timeout(TIMEOUT).unwrap(),
        format!("listener SASL_SSL SASL_SSL on {bound} advertised {bound}")
    );

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let config = std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = runtime.block_on(async {
        let connect = || async {
            let tcp = tokio::net::TcpStream::connect(bound).await.unwrap();
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(ServerName::IpAddress(bound.ip().into()), tcp)
                .await
                .unwrap();
            SaslClient::new(tls).with_timeout(TIMEOUT)
        };
        let flow = Flow::Authenticate(2);
        let mut outcomes = Vec::new();
        outcomes.push(
            connect()
                .await
                .plain(flow, "alice", "alice-pw")
                .await
                .unwrap(),
        );
        outcomes.push(connect().await.plain(flow, "alice", "wrong").await.unwrap());
        outcomes.push(
            connect()
                .await
                .scram(flow, ScramHash::Sha256, "bob", "bob-pw")
                .await
                .unwrap(),
        );
        // A user added while the gateway runs can log in once the file is read again.
        assert_eq!(
            users(&["set-password", "--file", path, "carol"], "carol-pw\n").0,
            Some(0)
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let outcome = connect()
                .await
                .plain(flow, "carol", "carol-pw")
                .await
                .unwrap();
            if outcome.is_authenticated() || Instant::now() > deadline {
                outcomes.push(outcome);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        outcomes
    });
    assert!(outcomes[0].is_authenticated(), "{outcomes:?}");
    assert!(
        matches!(outcomes[1], AuthOutcome::Rejected { error_code: 58, .. }),
        "{outcomes:?}"
    );
    assert!(outcomes[2].is_authenticated(), "{outcomes:?}");
    assert!(outcomes[3].is_authenticated(), "{outcomes:?}");

    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        !stderr.contains("alice-pw") && !stderr.contains("bob-pw"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unusable_certificate_stops_the_start_naming_the_file() {
    let dir = test_support::scratch_dir("cli-bad-cert");
    let cert = dir.join("cert.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    let key = dir.join("key.pem");
    std::fs::write(
        &key,
        test_support::certs::TestCa::default().server_cert().key_pem,
    )
    .unwrap();
    let out = run_to_end(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_TLS_CERT_FILE", cert.to_str().unwrap()),
            ("IGGY_KAFKA_TLS_KEY_FILE", key.to_str().unwrap()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(cert.to_str().unwrap()), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no listen line without a certificate"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_acl_file_is_loaded_and_authorization_stated_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let acls = dir.path().join("acls.json");
    std::fs::write(
        &acls,
        r#"{ "bindings": [ { "resource_type": "TOPIC", "name": "orders-", "pattern": "PREFIXED",
             "principal": "User:alice", "operation": "READ" } ] }"#,
    )
    .unwrap();
    let acls = acls.to_str().unwrap();
    let mut gw = Running::start(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_ACL_FILE", acls),
            ("IGGY_KAFKA_AUTHORIZATION_ENABLED", "true"),
        ],
    );
    gw.listen_line();
    gw.signal("TERM");
    let (status, stderr) = gw.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("ACL file read"), "{stderr}");
    assert!(stderr.contains("bindings=1"), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("authorization on"))
        .unwrap_or_else(|| panic!("no authorization line: {stderr}"));
    assert!(
        line.contains("others may do what ACL bindings allow;"),
        "{line}"
    );
    assert!(
        line.contains("a topic or group no binding names is refused"),
        "{line}"
    );
    assert!(
        line.contains("allow_everyone_if_no_acl_found=false"),
        "{line}"
    );
    assert!(line.contains(acls), "{line}");
    // No super user and allow-everyone off: said, since nobody can add bindings.
    assert!(
        stderr.contains("IGGY_KAFKA_SUPER_USERS is empty"),
        "{stderr}"
    );

    // Without an authenticating listener and not forced on: off, and said so.
    let mut gw = Running::start(&[], &[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")]);
    gw.listen_line();
    gw.signal("TERM");
    let (_, stderr) = gw.wait();
    assert!(
        stderr.contains("authorization off (no listener authenticates"),
        "{stderr}"
    );
}

#[test]
fn a_bad_or_oversized_acl_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let acls = dir.path().join("acls.json");
    let entry =
        r#"{ "resource_type": "TOPIC", "name": "t", "principal": "User:a", "operation": "READ" }"#;
    std::fs::write(&acls, format!(r#"{{ "bindings": [ {entry}, {{ "resource_type": "TOPIC", "name": "", "principal": "User:a", "operation": "READ" }} ] }}"#)).unwrap();
    let acls = acls.to_str().unwrap();
    let out = run_to_end(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_ACL_FILE", acls),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IGGY_KAFKA_ACL_FILE"), "{stderr}");
    assert!(stderr.contains("ACL binding 1"), "{stderr}");

    let other = dir.path().join("two.json");
    let other_entry =
        r#"{ "resource_type": "TOPIC", "name": "u", "principal": "User:a", "operation": "READ" }"#;
    std::fs::write(
        &other,
        format!(r#"{{ "bindings": [ {entry}, {other_entry} ] }}"#),
    )
    .unwrap();
    let out = run_to_end(
        &[],
        &[
            ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
            ("IGGY_KAFKA_ACL_FILE", other.to_str().unwrap()),
            ("IGGY_KAFKA_MAX_ACL_BINDINGS", "1"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IGGY_KAFKA_MAX_ACL_BINDINGS=1"), "{stderr}");
}

#[test]
fn other_gateways_need_the_bridge() {
    // The embedded store is one process's memory: a configuration error.
    assert_config_error(
        &[],
        &[
            ("IGGY_KAFKA_NODE_ID", "1"),
            ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:9093,2@127.0.0.2:9093"),
        ],
        &["IGGY_KAFKA_BROKERS=", "needs the Iggy bridge"],
    );
}

#[test]
fn the_listed_address_must_be_an_advertised_listener() {
    // The list names this gateway at a port it does not advertise: refused before any
    // socket is bound, naming what it does advertise.
    assert_config_error(
        &[],
        &[
            ("IGGY_KAFKA_NODE_ID", "1"),
            (
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://127.0.0.1:19092,SASL_PLAINTEXT://127.0.0.1:19093",
            ),
            ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
            ("IGGY_KAFKA_SASL_USERS_FILE", "/nonexistent/users.json"),
            ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19094"),
        ],
        &[
            "IGGY_KAFKA_BROKERS=",
            "names this gateway (node id 1) at 127.0.0.1:19094",
            "PLAINTEXT 127.0.0.1:19092, SASL_PLAINTEXT 127.0.0.1:19093",
        ],
    );
}
