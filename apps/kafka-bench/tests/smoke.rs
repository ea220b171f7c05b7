//! Smoke test: `kafka-bench` against the gateway binary, end to end, on loopback.
//!
//! Starts `iggy-gateway-kafka` (another package of the workspace: taken from
//! `KAFKA_BENCH_GATEWAY_BIN` or `<target dir>/debug/iggy-gateway-kafka`, built with
//! `cargo build -p iggy-gateway-kafka` when it is not there yet) on `127.0.0.1:0`,
//! produces a few thousand records for about two seconds, consumes the topic to its end
//! and checks from the JSON results that every acknowledged record was read exactly once;
//! then holds a few idle connections. `blast` writes its own pipelined Produce requests
//! and a consumer reads back exactly what it counted. A second gateway has a SASL_PLAINTEXT listener:
//! `auth` logs in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (and is refused with a wrong
//! password), and produce and consume run through librdkafka with PLAIN. No timing is
//! asserted: the machine may be busy.
//!
//! When the gateway cannot be had, or the benchmark binary cannot start (librdkafka
//! missing at run time), the test prints `SKIPPED:` and passes, unless
//! `KAFKA_CLIENTS_REQUIRED=1`, which makes that a failure.
#![cfg(feature = "librdkafka")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BENCH: &str = env!("CARGO_BIN_EXE_kafka-bench");
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const BUILD_TIMEOUT: Duration = Duration::from_secs(1200);

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

fn required() -> bool {
    std::env::var("KAFKA_CLIENTS_REQUIRED").as_deref() == Ok("1")
}

/// Passes with a `SKIPPED:` line, or fails when the suite is required.
fn skip(why: &str) {
    if required() {
        panic!("KAFKA_CLIENTS_REQUIRED=1 but {why}");
    }
    println!("SKIPPED: kafka-bench smoke test: {why}");
}

/// Waits for `child` up to `limit`; kills it when the limit passes.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gateway binary; built once when missing. An existing binary is used as it is: a
/// rebuild with `-p` alone could resolve features differently and churn the target dir.
fn gateway_binary() -> Result<PathBuf, String> {
    // An explicit binary (a release build, say) wins.
    if let Some(bin) = std::env::var_os("KAFKA_BENCH_GATEWAY_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!(
                "KAFKA_BENCH_GATEWAY_BIN={} is not a file",
                bin.display()
            ))
        };
    }
    let bin = target_dir().join("debug/iggy-gateway-kafka");
    if bin.is_file() {
        return Ok(bin);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building the gateway: {cargo} build -p iggy-gateway-kafka");
    let mut child = Command::new(&cargo)
        .args(["build", "-p", "iggy-gateway-kafka"])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    match wait_bounded(&mut child, BUILD_TIMEOUT) {
        Some(s) if s.success() && bin.is_file() => Ok(bin),
        Some(s) => Err(format!(
            "`cargo build -p iggy-gateway-kafka` ended with {s}; no {}",
            bin.display()
        )),
        None => Err("`cargo build -p iggy-gateway-kafka` took too long".into()),
    }
}

fn scratch_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir =
        std::env::temp_dir().join(format!("kafka-bench-smoke-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The gateway on a random loopback port; killed and its scratch dir removed on drop.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Gateway {
    fn start(bin: &Path) -> Gateway {
        Gateway::start_in(bin, scratch_dir(), &[])
    }

    /// The gateway with extra `IGGY_KAFKA_*` settings, its files in `dir`.
    fn start_in(bin: &Path, dir: PathBuf, env: &[(&str, String)]) -> Gateway {
        let stdout = dir.join("gateway.stdout");
        let stderr = dir.join("gateway.stderr");
        let child = Command::new(bin)
            .env("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut gw = Gateway {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let mut text = String::new();
            if let Ok(mut f) = fs::File::open(&stdout) {
                let _ = f.read_to_string(&mut text);
            }
            // First stdout line: `listening on <BOUND_ADDR> advertised <HOST:PORT>`
            if let Some((line, _)) = text.split_once('\n') {
                let bound = line
                    .strip_prefix("listening on ")
                    .and_then(|r| r.split_once(" advertised "))
                    .and_then(|(b, _)| b.parse::<SocketAddr>().ok());
                match bound {
                    Some(a) => {
                        gw.addr = a;
                        return gw;
                    }
                    None => panic!("unexpected gateway stdout line: {line:?}"),
                }
            }
            if let Ok(Some(status)) = gw.child.try_wait() {
                panic!(
                    "gateway exited with {status}: {}",
                    fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "gateway did not print its listen line in {STARTUP_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Runs `kafka-bench` with `args` plus `--json FILE`, bounded; returns the JSON result.
fn bench(args: &[&str], json: &Path) -> serde_json::Value {
    let (status, result) = bench_with(args, &[], json);
    assert!(status.success(), "kafka-bench {args:?} ended with {status}");
    result
}

/// Reads `topic` back whole with one consumer (`kafka-bench consume`).
fn read_back(addr: &str, topic: &str, json: &Path) -> serde_json::Value {
    bench(
        &[
            "consume",
            "--bootstrap",
            addr,
            "--topic",
            topic,
            "--timeout",
            "90",
        ],
        json,
    )
}

/// Runs `kafka-bench` with `args`, extra environment and `--json FILE`, bounded; returns
/// how it ended and the JSON result.
fn bench_with(
    args: &[&str],
    env: &[(&str, &str)],
    json: &Path,
) -> (std::process::ExitStatus, serde_json::Value) {
    let mut child = Command::new(BENCH)
        .args(args)
        .arg("--json")
        .arg(json)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting kafka-bench: {e}"));
    let status = wait_bounded(&mut child, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("kafka-bench {args:?} ran longer than {RUN_TIMEOUT:?}"));
    let text = fs::read_to_string(json).unwrap_or_else(|e| {
        panic!(
            "kafka-bench {args:?} ended with {status}, {}: {e}",
            json.display()
        )
    });
    (status, serde_json::from_str(&text).unwrap())
}

/// The benchmark binary starts (it links librdkafka dynamically: if the library is gone
/// at run time it cannot even print its version) and the gateway binary is there; else
/// the test is skipped (or fails under `KAFKA_CLIENTS_REQUIRED=1`).
fn ready() -> Option<PathBuf> {
    let runs = Command::new(BENCH)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        skip("kafka-bench does not start (librdkafka missing? run scripts/install-clients.sh)");
        return None;
    }
    match gateway_binary() {
        Ok(bin) => Some(bin),
        Err(e) => {
            skip(&format!("no gateway binary: {e}"));
            None
        }
    }
}

#[test]
fn produce_then_consume_everything_through_librdkafka() {
    let Some(bin) = ready() else { return };
    let gw = Gateway::start(&bin);
    let addr = gw.addr.to_string();
    let pid = gw.child.id().to_string();
    let produced = bench(
        &[
            "produce",
            "--bootstrap",
            &addr,
            "--topic",
            "smoke",
            "--partitions",
            "3",
            "--producers",
            "2",
            "--record-size",
            "200",
            "--records",
            "4000",
            "--rate",
            "2000",
            "--codec",
            "lz4",
            "--gateway-pid",
            &pid,
            "--timeout",
            "90",
        ],
        &gw.dir.join("produce.json"),
    );
    assert_eq!(produced["errors"], 0, "{produced:#}");
    assert_eq!(produced["records"], 4000, "{produced:#}");
    assert_eq!(produced["partitions"], 3, "{produced:#}");
    assert!(
        produced["broker"]["peak_rss_kib_during_run"].as_u64() > Some(0),
        "{produced:#}"
    );
    assert!(
        produced["client_cpu_secs"].as_f64() >= Some(0.0),
        "{produced:#}"
    );

    let consumed = bench(
        &[
            "consume",
            "--bootstrap",
            &addr,
            "--topic",
            "smoke",
            "--consumers",
            "2",
            "--timeout",
            "90",
        ],
        &gw.dir.join("consume.json"),
    );
    assert_eq!(consumed["expected"], 4000, "{consumed:#}");
    assert_eq!(consumed["records"], 4000, "{consumed:#}");
    assert_eq!(consumed["unique_records"], 4000, "{consumed:#}");
    assert_eq!(consumed["duplicates"], 0, "{consumed:#}");
    assert_eq!(consumed["complete"], true, "{consumed:#}");
    assert_eq!(consumed["bytes"], 4000 * 200, "{consumed:#}");

    let idle = bench(
        &[
            "idle-connections",
            "--bootstrap",
            &addr,
            "--count",
            "20",
            "--hold",
            "1",
            "--gateway-pid",
            &pid,
        ],
        &gw.dir.join("idle.json"),
    );
    assert_eq!(idle["established"], 20, "{idle:#}");
    assert_eq!(idle["alive_after_hold"], 20, "{idle:#}");
}

/// `blast`'s own Produce requests (pipelined, two partitions, two connections) are all
/// answered without an error, and a librdkafka consumer then reads exactly the records
/// `blast` counted as acknowledged: the tool's encoding is one a real client reads back.
#[test]
fn blast_requests_are_acknowledged_and_read_back() {
    let Some(bin) = ready() else { return };
    let gw = Gateway::start(&bin);
    let addr = gw.addr.to_string();
    let pid = gw.child.id().to_string();
    let blasted = bench(
        &[
            "blast",
            "--bootstrap",
            &addr,
            "--topic",
            "blast",
            "--partitions",
            "2",
            "--connections",
            "2",
            "--record-size",
            "100",
            "--batch-size",
            "20000",
            "--max-in-flight",
            "3",
            "--duration",
            "1",
            "--gateway-pid",
            &pid,
            "--timeout",
            "90",
        ],
        &gw.dir.join("blast.json"),
    );
    assert_eq!(blasted["errors"], 0, "{blasted:#}");
    assert_eq!(blasted["partitions"], 2, "{blasted:#}");
    let per_request = blasted["records_per_request"].as_u64().unwrap();
    let requests = blasted["requests"].as_u64().unwrap();
    assert!(per_request > 100 && requests > 0, "{blasted:#}");
    let acked = blasted["records"].as_u64().unwrap();
    assert_eq!(acked, per_request * requests, "{blasted:#}");

    let consumed = read_back(&addr, "blast", &gw.dir.join("consume.json"));
    assert_eq!(consumed["expected"], acked, "{consumed:#}");
    assert_eq!(consumed["records"], acked, "{consumed:#}");
    assert_eq!(consumed["duplicates"], 0, "{consumed:#}");
    assert_eq!(consumed["bytes"], acked * 100, "{consumed:#}");

    // Idempotent: each connection's sequences follow on, so nothing is refused as out of
    // order or taken for a duplicate.
    let idempotent = bench(
        &[
            "blast",
            "--bootstrap",
            &addr,
            "--topic",
            "blast-idempotent",
            "--partitions",
            "2",
            "--connections",
            "3",
            "--record-size",
            "100",
            "--batch-size",
            "20000",
            "--max-in-flight",
            "5",
            "--duration",
            "1",
            "--idempotent",
            "--timeout",
            "90",
        ],
        &gw.dir.join("blast-idempotent.json"),
    );
    assert_eq!(idempotent["errors"], 0, "{idempotent:#}");
    let acked = idempotent["records"].as_u64().unwrap();
    assert!(acked > 0, "{idempotent:#}");
    let consumed = read_back(
        &addr,
        "blast-idempotent",
        &gw.dir.join("consume-idempotent.json"),
    );
    assert_eq!(consumed["records"], acked, "{consumed:#}");
    assert_eq!(consumed["duplicates"], 0, "{consumed:#}");
}

/// Transactional producers commit every `--txn-records` records: every record is
/// acknowledged, the commits are counted, and a read_committed consumer reads every record
/// and finishes although each partition ends with a commit marker it never sees.
#[test]
fn transactional_produce_then_read_committed() {
    let Some(bin) = ready() else { return };
    let gw = Gateway::start(&bin);
    let addr = gw.addr.to_string();
    let produced = bench(
        &[
            "produce",
            "--bootstrap",
            &addr,
            "--topic",
            "txn-smoke",
            "--partitions",
            "2",
            "--producers",
            "2",
            "--record-size",
            "100",
            "--records",
            "2000",
            "--transactional",
            "--txn-records",
            "250",
            "--timeout",
            "90",
        ],
        &gw.dir.join("txn-produce.json"),
    );
    assert_eq!(produced["errors"], 0, "{produced:#}");
    assert_eq!(produced["records"], 2000, "{produced:#}");
    // 1000 records per producer, 250 per transaction.
    assert_eq!(produced["transactions_committed"], 8, "{produced:#}");

    for isolation in ["read-committed", "read-uncommitted"] {
        let consumed = bench(
            &[
                "consume",
                "--bootstrap",
                &addr,
                "--topic",
                "txn-smoke",
                "--isolation",
                isolation,
                "--timeout",
                "60",
            ],
            &gw.dir.join(format!("txn-consume-{isolation}.json")),
        );
        assert_eq!(consumed["records"], 2000, "{isolation}: {consumed:#}");
        assert_eq!(consumed["duplicates"], 0, "{isolation}: {consumed:#}");
        assert_eq!(consumed["complete"], true, "{isolation}: {consumed:#}");
    }
}

/// A SASL_PLAINTEXT gateway whose users file holds `bench` (a super user) with a PLAIN
/// password and both SCRAM credentials: `auth` logs in with every mechanism and is refused with a wrong
/// password; produce and consume work through librdkafka with PLAIN.
#[test]
fn authenticates_with_every_mechanism_and_loads_over_sasl() {
    use kafka_sasl::{ScramCredential, ScramMechanism, UsersFile};
    let Some(bin) = ready() else { return };
    let dir = scratch_dir();
    let users_path = dir.join("users.json");
    let password = format!("pw-{}", std::process::id());
    // Few PLAIN iterations (the file records them per user): a debug-built gateway then
    // checks each PLAIN login quickly; the production count is what the bench measures.
    let users = UsersFile::load(&users_path)
        .unwrap()
        .with_plain_iterations(4096);
    users.set_password("bench", &password).unwrap();
    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        users
            .set_scram(
                "bench",
                ScramCredential::from_password(m, &password, 4096).unwrap(),
            )
            .unwrap();
    }
    let gw = Gateway::start_in(
        &bin,
        dir,
        &[
            ("IGGY_KAFKA_SASL_ENABLED", "true".into()),
            (
                "IGGY_KAFKA_SASL_USERS_FILE",
                users_path.display().to_string(),
            ),
            // Authorization is on with SASL and nothing is open by default: the bench
            // user is the super user, as an operator's load-test account would be.
            ("IGGY_KAFKA_SUPER_USERS", "User:bench".into()),
        ],
    );
    let addr = gw.addr.to_string();
    let creds = [
        ("KAFKA_BENCH_SASL_USERNAME", "bench"),
        ("KAFKA_BENCH_SASL_PASSWORD", password.as_str()),
    ];
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
        let json = gw.dir.join(format!("auth-{mechanism}.json"));
        let args = [
            "auth",
            "--bootstrap",
            &addr,
            "--security-protocol",
            "sasl_plaintext",
            "--sasl-mechanism",
            mechanism,
            "--workers",
            "2",
            "--duration",
            "1",
        ];
        let (status, auth) = bench_with(&args, &creds, &json);
        assert!(status.success(), "{mechanism}: {auth:#}");
        assert_eq!(auth["errors"], 0, "{auth:#}");
        assert!(auth["authentications"].as_u64() > Some(0), "{auth:#}");
        assert_eq!(auth["mechanism"], mechanism, "{auth:#}");
    }

    // A wrong password: every login refused, the run reports it and fails.
    let wrong = [
        ("KAFKA_BENCH_SASL_USERNAME", "bench"),
        ("KAFKA_BENCH_SASL_PASSWORD", "not-the-password"),
    ];
    let args = [
        "auth",
        "--bootstrap",
        &addr,
        "--security-protocol",
        "sasl_plaintext",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--workers",
        "1",
        "--duration",
        "1",
    ];
    let (status, refused) = bench_with(&args, &wrong, &gw.dir.join("auth-wrong.json"));
    assert!(!status.success(), "{refused:#}");
    assert_eq!(refused["authentications"], 0, "{refused:#}");
    assert!(refused["errors"].as_u64() > Some(0), "{refused:#}");
    assert!(
        refused["first_error"]
            .as_str()
            .is_some_and(|e| e.contains("error code 58")),
        "{refused:#}"
    );

    let security = [
        "--security-protocol",
        "sasl_plaintext",
        "--sasl-mechanism",
        "PLAIN",
    ];
    let mut args = vec![
        "produce",
        "--bootstrap",
        &addr,
        "--topic",
        "sasl",
        "--records",
        "500",
        "--record-size",
        "100",
        "--timeout",
        "90",
    ];
    args.extend_from_slice(&security);
    let (status, produced) = bench_with(&args, &creds, &gw.dir.join("produce.json"));
    assert!(status.success(), "{produced:#}");
    assert_eq!(produced["records"], 500, "{produced:#}");
    assert_eq!(produced["security"], "SASL_PLAINTEXT PLAIN as bench");
    let mut args = vec![
        "consume",
        "--bootstrap",
        &addr,
        "--topic",
        "sasl",
        "--timeout",
        "90",
    ];
    args.extend_from_slice(&security);
    let (status, consumed) = bench_with(&args, &creds, &gw.dir.join("consume.json"));
    assert!(status.success(), "{consumed:#}");
    assert_eq!(consumed["unique_records"], 500, "{consumed:#}");
}
