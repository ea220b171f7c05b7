//! Attacks on authentication and TLS, against the gateway binary over raw TCP.
//!
//! One gateway per test with three listeners: `PLAINTEXT` (where the well-behaved
//! [`Prober`] asks ApiVersions every 50 ms), `SASL_PLAINTEXT` and `SSL`, with short
//! timeouts and failure delays set through the environment so the gateway's own deadlines
//! come into play within the test. Each test checks, besides what the attack should meet,
//! that the gateway is still running, that its peak resident memory stayed under
//! [`PEAK_RSS_KIB`] and that every probe was answered within [`ANSWER`].
//!
//! - A flood of wrong passwords from many connections: every rejection is
//!   `SASL_AUTHENTICATION_FAILED` followed by a close, the delay grows to its maximum and
//!   stays there although a valid user logs in from the same address all along (without
//!   waiting), so the flood gets few guesses in.
//! - TLS handshakes that never finish (silence, half a ClientHello): closed at the
//!   handshake timeout, counted, nothing else disturbed.
//! - Unauthenticated connections that idle after ApiVersions, send a frame larger than
//!   the pre-authentication limit, or send requests before authenticating: closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use support::Gateway;
use support::attack::{
    METADATA, Prober, api_versions, closed_within, connect, frame, peak_rss_kib, read_frame,
};
use support::security::SecureSetup;
use test_support::free_port;

/// The well-behaved client's bound on every answer.
const ANSWER: Duration = Duration::from_secs(2);
/// The gateway's peak resident memory bound in every test (KiB).
const PEAK_RSS_KIB: u64 = 96 * 1024;
const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// First delay after a rejection, and its cap, as configured for these tests.
const DELAY: Duration = Duration::from_millis(100);
const DELAY_MAX: Duration = Duration::from_millis(1600);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(1000);
const AUTH_TIMEOUT: Duration = Duration::from_millis(2000);

/// Held by each test while it runs: one gateway under attack at a time.
static TURN: Mutex<()> = Mutex::new(());

fn my_turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A gateway under attack and its three listeners.
struct Target {
    gw: Gateway,
    plain: SocketAddr,
    sasl: SocketAddr,
    ssl: SocketAddr,
    metrics: SocketAddr,
    setup: SecureSetup,
}

fn start() -> Target {
    let setup = SecureSetup::new();
    let (p1, p2, p3, p4) = (free_port(), free_port(), free_port(), free_port());
    let path = |p: &std::path::Path| p.display().to_string();
    let env: Vec<(&str, String)> = vec![
        (
            "IGGY_KAFKA_LISTENERS",
            format!(
                "PLAINTEXT://127.0.0.1:{p1},SASL_PLAINTEXT://127.0.0.1:{p2},SSL://127.0.0.1:{p3}"
            ),
        ),
        ("IGGY_KAFKA_METRICS_ADDR", format!("127.0.0.1:{p4}")),
        ("IGGY_KAFKA_TLS_CERT_FILE", path(&setup.server_cert_file)),
        ("IGGY_KAFKA_TLS_KEY_FILE", path(&setup.server_key_file)),
        ("IGGY_KAFKA_SASL_USERS_FILE", path(&setup.users_file)),
        (
            "IGGY_KAFKA_TLS_HANDSHAKE_TIMEOUT_MS",
            HANDSHAKE_TIMEOUT.as_millis().to_string(),
        ),
        (
            "IGGY_KAFKA_SASL_AUTHENTICATION_TIMEOUT_MS",
            AUTH_TIMEOUT.as_millis().to_string(),
        ),
        (
            "IGGY_KAFKA_SASL_FAILURE_DELAY_MS",
            DELAY.as_millis().to_string(),
        ),
        (
            "IGGY_KAFKA_SASL_FAILURE_DELAY_MAX_MS",
            DELAY_MAX.as_millis().to_string(),
        ),
        // Room for every attack connection from one address.
        ("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP", "2000".into()),
        ("IGGY_KAFKA_TEST_RUST_LOG", "info".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut gw = Gateway::spawn(&env, false);
    let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
    for a in [addr(p1), addr(p2), addr(p3)] {
        gw.wait_for(Duration::from_secs(30), &format!("accept on {a}"), |_| {
            TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok()
        });
    }
    gw.addr = addr(p1);
    Target {
        gw,
        plain: addr(p1),
        sasl: addr(p2),
        ssl: addr(p3),
        metrics: addr(p4),
        setup,
    }
}

impl Target {
    /// The checks every test ends with.
    fn survived(&mut self, probes: support::attack::ProbeReport) {
        assert!(
            self.gw.is_running(),
            "the gateway died\n{}",
            self.gw.output(60)
        );
        probes.assert_answered_within(ANSWER, &self.gw);
        let peak = peak_rss_kib(self.gw.pid()).unwrap();
        assert!(
            peak < PEAK_RSS_KIB,
            "peak RSS {peak} KiB over {PEAK_RSS_KIB} KiB\n{}",
            self.gw.output(40)
        );
    }

    /// The sum of the samples of counter `name` whose labels contain `labels`.
    fn counter(&self, name: &str, labels: &str) -> f64 {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

fn kafka_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as i16).to_be_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

fn kafka_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = (b.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(b);
    out
}

/// The error code of a SaslHandshake or SaslAuthenticate v1 response (after the
/// correlation id).
fn error_code(response: &[u8]) -> i16 {
    i16::from_be_bytes([response[4], response[5]])
}

/// One PLAIN login on a new connection to `addr`: the SaslAuthenticate error code (`None`
/// when the connection ended first) and how long its answer took.
fn plain_login(addr: SocketAddr, user: &str, password: &str) -> (Option<i16>, Duration) {
    let mut s = connect(addr).unwrap();
    s.write_all(&frame(
        SASL_HANDSHAKE,
        1,
        1,
        b"attack",
        false,
        &kafka_string("PLAIN"),
    ))
    .unwrap();
    let Some(handshake) = read_frame(&mut s, 1 << 16) else {
        return (None, Duration::ZERO);
    };
    assert_eq!(error_code(&handshake), 0, "PLAIN is offered");
    let token = format!("\0{user}\0{password}");
    let started = Instant::now();
    s.write_all(&frame(
        SASL_AUTHENTICATE,
        1,
        2,
        b"attack",
        false,
        &kafka_bytes(token.as_bytes()),
    ))
    .unwrap();
    let answer = read_frame(&mut s, 1 << 16);
    let took = started.elapsed();
    let code = answer.map(|a| error_code(&a));
    if code == Some(SASL_AUTHENTICATION_FAILED) {
        assert!(
            closed_within(&mut s, Duration::from_secs(2)),
            "a rejected connection is closed"
        );
    }
    (code, took)
}

#[test]
fn a_wrong_password_flood_is_slowed_while_a_valid_user_logs_in() {
    let _turn = my_turn();
    let mut t = start();
    let probe = Prober::start(t.plain, Duration::from_millis(50));
    let stop = Arc::new(AtomicBool::new(false));
    let rejected = Arc::new(AtomicUsize::new(0));
    // (when the guess was sent, relative to the start; how long its rejection took)
    let answers = Arc::new(Mutex::new(Vec::<(Duration, Duration)>::new()));
    let t0 = Instant::now();
    let flood: Vec<_> = (0..16)
        .map(|_| {
            let (stop, rejected, answers, addr) =
                (stop.clone(), rejected.clone(), answers.clone(), t.sasl);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let sent = t0.elapsed();
                    let (code, took) = plain_login(addr, "alice", "not-her-password");
                    assert_eq!(code, Some(SASL_AUTHENTICATION_FAILED));
                    rejected.fetch_add(1, Ordering::Relaxed);
                    answers.lock().unwrap().push((sent, took));
                }
            })
        })
        .collect();
    // A valid user on the same address, all along: never delayed, never refused.
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut logins = 0;
    while Instant::now() < deadline {
        let (code, took) = plain_login(t.sasl, "alice", &t.setup.plain_password);
        assert_eq!(code, Some(0), "the valid login failed during the flood");
        assert!(took < ANSWER, "the valid login took {took:?}");
        logins += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    let rejected = rejected.load(Ordering::Relaxed);
    // Once the delay has reached its cap it stays there, although the valid user logged
    // in every 200 ms in between: a success does not buy the flood fast guesses.
    let answers = answers.lock().unwrap();
    let late: Vec<_> = answers
        .iter()
        .filter(|(sent, _)| *sent >= Duration::from_secs(3))
        .map(|(_, took)| *took)
        .collect();
    assert!(!late.is_empty(), "no guesses after the first 3 s");
    let fastest = late.iter().min().copied().unwrap_or_default();
    assert!(
        fastest >= DELAY_MAX - Duration::from_millis(100),
        "a rejection after 3 s took only {fastest:?} (cap {DELAY_MAX:?}): the delay was reset"
    );
    // Without a delay 16 connections would get hundreds of guesses in 6 s; with it every
    // guess after the first few waits the cap (16 at a time).
    let ceiling = 16 * (6_000 / DELAY_MAX.as_millis() as usize + 1) + 16 * 5;
    assert!(
        rejected <= ceiling,
        "{rejected} guesses in 6 s (at most {ceiling} expected)"
    );
    let counted = t.counter(
        "kafka_gateway_sasl_authentications_total",
        "outcome=\"failure\"",
    );
    assert!(
        counted >= rejected as f64,
        "metrics counted {counted} failures, the flood saw {rejected}"
    );
    assert!(logins >= 10, "only {logins} valid logins");
    t.survived(probe.finish());
}

#[test]
fn tls_handshakes_that_never_finish_are_closed_at_the_timeout() {
    let _turn = my_turn();
    let mut t = start();
    let probe = Prober::start(t.plain, Duration::from_millis(50));
    let started = Instant::now();
    let mut stalled: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut s = connect(t.ssl).unwrap();
            if i % 2 == 1 {
                // A handshake record header announcing 512 bytes, and 5 of them.
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03])
                    .unwrap();
            }
            s
        })
        .collect();
    for s in &mut stalled {
        let left = (HANDSHAKE_TIMEOUT + Duration::from_secs(3)).saturating_sub(started.elapsed());
        assert!(
            closed_within(s, left.max(Duration::from_millis(200))),
            "a stalled TLS handshake was not closed"
        );
    }
    let timeouts = t.counter(
        "kafka_gateway_tls_handshake_failures_total",
        "reason=\"timeout\"",
    );
    let by_reason: Vec<(&str, f64)> = ["timeout", "io", "handshake", "not_tls", "no_principal"]
        .into_iter()
        .map(|r| {
            let label = format!("reason=\"{r}\"");
            (
                r,
                t.counter("kafka_gateway_tls_handshake_failures_total", &label),
            )
        })
        .collect();
    assert!(
        timeouts >= 200.0,
        "{timeouts} handshake timeouts counted; all failures by reason: {by_reason:?}"
    );
    // A plaintext Kafka client on the TLS port is closed at once, not at the timeout.
    let mut s = connect(t.ssl).unwrap();
    s.write_all(&api_versions(1)).unwrap();
    assert!(closed_within(&mut s, HANDSHAKE_TIMEOUT / 2));
    t.survived(probe.finish());
}

#[test]
fn unauthenticated_connections_are_closed() {
    let _turn = my_turn();
    let mut t = start();
    let probe = Prober::start(t.plain, Duration::from_millis(50));
    let started = Instant::now();
    // Idle after ApiVersions (allowed before authentication): closed at the deadline.
    let mut idle: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut s = connect(t.sasl).unwrap();
            s.write_all(&api_versions(i)).unwrap();
            assert!(
                read_frame(&mut s, 1 << 20).is_some(),
                "ApiVersions answered"
            );
            s
        })
        .collect();
    // A frame over the pre-authentication limit (512 KiB): closed without waiting for it.
    let mut big: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect(t.sasl).unwrap();
            s.write_all(&(64 * 1024 * 1024i32).to_be_bytes()).unwrap();
            let _ = s.write_all(&vec![0u8; 64 * 1024]);
            s
        })
        .collect();
    for s in &mut big {
        assert!(
            closed_within(s, Duration::from_secs(1)),
            "an oversized frame before authentication was not refused"
        );
    }
    // Requests other than ApiVersions and SASL before authentication: closed.
    let mut early = connect(t.sasl).unwrap();
    early
        .write_all(&frame(
            METADATA,
            1,
            7,
            b"attack",
            false,
            &(-1i32).to_be_bytes(),
        ))
        .unwrap();
    assert!(closed_within(&mut early, Duration::from_secs(1)));
    for s in &mut idle {
        let left = (AUTH_TIMEOUT + Duration::from_secs(3)).saturating_sub(started.elapsed());
        assert!(
            closed_within(s, left.max(Duration::from_millis(200))),
            "an unauthenticated connection outlived the authentication timeout"
        );
    }
    assert!(
        started.elapsed() >= AUTH_TIMEOUT - Duration::from_millis(100),
        "closed before the deadline"
    );
    t.survived(probe.finish());
}
