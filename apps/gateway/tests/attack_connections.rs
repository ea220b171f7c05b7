//! Attacks on connections and request memory, against the gateway binary over raw TCP.
//!
//! Each test runs an attack for a few seconds while a well-behaved client (the
//! [`Prober`]) asks ApiVersions every 50 ms, then checks three things: the gateway is
//! still running, its peak resident memory stayed under [`PEAK_RSS_KIB`], and every probe
//! was answered within [`ANSWER`]. Read timeouts are shortened through the environment so
//! the gateway's own deadlines come into play within the test. The tests take turns (one
//! gateway under attack at a time), so their latency bounds are not measuring each other.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::Gateway;
use support::attack::{
    FETCH, METADATA, Prober, api_versions, closed_within, connect, frame, peak_rss_bound_kib,
    peak_rss_kib, read_frame,
};

/// The well-behaved client's bound on every answer.
const ANSWER: Duration = Duration::from_secs(2);
/// The gateway's peak resident memory bound in every test (KiB): far below the 512 MiB
/// request budget the original attack took, and below a single 100 MiB frame.
const PEAK_RSS_KIB: u64 = 96 * 1024;
/// A frame size just under the default maximum (100 MiB).
const HUGE: i32 = 100 * 1024 * 1024 - 64;
const LOG_LINES: usize = 40;

/// Held by each test while it runs.
static TURN: Mutex<()> = Mutex::new(());

fn my_turn() -> MutexGuard<'static, ()> {
    // A test that failed while holding it leaves it poisoned; the next may still run.
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A free loopback address for the metrics endpoint.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Polls gauge `name` on the metrics endpoint at `metrics` every 100 ms until stopped;
/// the largest value seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<f64>,
}

impl Sampler {
    fn start(metrics: SocketAddr, name: &'static str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut most = f64::NAN;
            while !flag.load(Ordering::Relaxed) {
                if let Some(v) = gauge(metrics, name) {
                    most = if most.is_nan() { v } else { most.max(v) };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            most
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// One sample of `name` from `/metrics`.
fn gauge(metrics: SocketAddr, name: &str) -> Option<f64> {
    let mut s = connect(metrics).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Runs `attack` on `threads` threads for `how_long`; each gets its index and a stop flag.
fn attackers(
    threads: usize,
    how_long: Duration,
    attack: impl Fn(usize, &AtomicBool) + Send + Sync + 'static,
) -> (Arc<AtomicBool>, Vec<JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let attack = Arc::new(attack);
    let handles = (0..threads)
        .map(|i| {
            let stop = stop.clone();
            let attack = attack.clone();
            std::thread::spawn(move || attack(i, &stop))
        })
        .collect();
    let flag = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(how_long);
        flag.store(true, Ordering::Relaxed);
    });
    (stop, handles)
}

/// Checks the three promises after an attack.
fn assert_survived(gw: &mut Gateway, prober: Prober, what: &str) {
    let report = prober.finish();
    if let Some(status) = gw.exit_status() {
        panic!(
            "{what}: the gateway died ({status})\n{}",
            gw.output(LOG_LINES)
        );
    }
    let peak = peak_rss_kib(gw.pid()).expect("VmHWM of the gateway");
    let bound = peak_rss_bound_kib(gw, PEAK_RSS_KIB);
    assert!(
        peak < bound,
        "{what}: peak RSS {peak} KiB (bound {bound} KiB)\n{}",
        gw.output(LOG_LINES)
    );
    report.assert_answered_within(ANSWER, gw);
    eprintln!(
        "{what}: {} probes, p99 {:?}, max {:?}, peak RSS {peak} KiB",
        report.answered,
        report.quantile(0.99),
        report.max
    );
}

/// Connects; `None` when refused or reset (expected during a flood).
fn try_connect(addr: SocketAddr) -> Option<TcpStream> {
    connect(addr).ok()
}

/// Sends `bytes` over `s` in `piece`-sized writes `every` apart until done or stopped;
/// `false` when the gateway closed the connection.
fn trickle(
    s: &mut TcpStream,
    bytes: &[u8],
    piece: usize,
    every: Duration,
    stop: &AtomicBool,
) -> bool {
    for chunk in bytes.chunks(piece) {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        if s.write_all(chunk).is_err() {
            return false;
        }
        std::thread::sleep(every);
    }
    true
}

/// Connections that each announce a ~100 MiB frame, send nothing more, and reconnect when
/// the gateway gives up on them.
fn silent_announcers(connections: usize) {
    let _turn = my_turn();
    let metrics = free_addr();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[
            ("IGGY_KAFKA_READ_TIMEOUT_SECS", "2"),
            ("IGGY_KAFKA_METRICS_ADDR", &metrics.to_string()),
        ],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let held = Sampler::start(metrics, "kafka_gateway_request_memory_in_use_bytes");
    let addr = gw.addr;
    let reconnects = Arc::new(AtomicUsize::new(0));
    let counted = reconnects.clone();
    let (_, handles) = attackers(connections, Duration::from_secs(8), move |_, stop| {
        while !stop.load(Ordering::Relaxed) {
            let Some(mut s) = try_connect(addr) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if s.write_all(&HUGE.to_be_bytes()).is_err() {
                continue;
            }
            counted.fetch_add(1, Ordering::Relaxed);
            // Hold it until the gateway closes it (its read timeout) or the attack ends.
            while !stop.load(Ordering::Relaxed)
                && !closed_within(&mut s, Duration::from_millis(200))
            {}
        }
    });
    // A large request from a well-behaved client goes through meanwhile too.
    std::thread::sleep(Duration::from_secs(1));
    let mut big = connect(gw.addr).unwrap();
    let started = Instant::now();
    big.write_all(&frame(18, 0, 77, b"big", false, &vec![0u8; 8 << 20]))
        .unwrap();
    let body = read_frame(&mut big, 1 << 20).expect("an 8 MiB request answered");
    assert_eq!(body[..4], 77i32.to_be_bytes());
    let big_took = started.elapsed();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        reconnects.load(Ordering::Relaxed) > connections,
        "the attackers reconnected after the read timeout"
    );
    assert!(
        big_took < Duration::from_secs(5),
        "8 MiB request took {big_took:?}"
    );
    // The announcers held a step each (at most 8 KiB), never their announced 100 MiB;
    // the 8 MiB request held its size.
    let most = held.finish();
    let bound = (8 << 20) + connections * 8 * 1024 + (1 << 20);
    assert!(
        most <= bound as f64,
        "request memory in use peaked at {most} bytes (bound {bound})"
    );
    assert_survived(&mut gw, prober, &format!("{connections} silent announcers"));
}

#[test]
fn six_connections_announcing_100_mib_and_going_silent() {
    silent_announcers(6);
}

#[test]
fn fifty_connections_announcing_100_mib_and_going_silent() {
    silent_announcers(50);
}

#[test]
fn trickle_senders_hold_only_what_they_sent() {
    let _turn = my_turn();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[("IGGY_KAFKA_READ_TIMEOUT_SECS", "3")],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let addr = gw.addr;
    // Half trickle a 100 MiB frame 4 KiB at a time, half a 60 KiB small request 64 bytes
    // at a time; the gateway closes each at its read deadline and they come back.
    let (_, handles) = attackers(40, Duration::from_secs(8), move |i, stop| {
        let small = frame(18, 0, 1, b"trickle", false, &vec![0u8; 60 * 1024]);
        let mut large = HUGE.to_be_bytes().to_vec();
        large.resize(16 << 20, 0);
        while !stop.load(Ordering::Relaxed) {
            let Some(mut s) = try_connect(addr) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if i % 2 == 0 {
                trickle(&mut s, &large, 4096, Duration::from_millis(20), stop);
            } else {
                trickle(&mut s, &small, 64, Duration::from_millis(20), stop);
            }
        }
    });
    for h in handles {
        h.join().unwrap();
    }
    assert_survived(&mut gw, prober, "40 trickle senders");
}

#[test]
fn slow_senders_cannot_hold_kept_read_buffers_beyond_the_pool() {
    // Requests of 64 KiB and more are read into buffers the gateway keeps (at most
    // `frame_pool_bytes` idle), and a request takes an idle one as soon as its
    // size is known, before its memory lease covers it. A hundred slow senders of 1 MiB
    // requests would hold up to a hundred resident buffers ahead of their leases if those
    // did not count against the pool's bound (16 MiB here), while eight fast senders keep
    // giving new buffers back to the pool: over the peak RSS bound. Counted, they hold at
    // most 16 MiB.
    const POOL: f64 = 16.0 * 1024.0 * 1024.0;
    let _turn = my_turn();
    let metrics = free_addr();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[
            ("IGGY_KAFKA_READ_TIMEOUT_SECS", "4"),
            ("IGGY_KAFKA_FRAME_POOL_BYTES", "16777216"),
            ("IGGY_KAFKA_METRICS_ADDR", &metrics.to_string()),
        ],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let ahead = Sampler::start(metrics, "kafka_gateway_frame_pool_lent_ahead_bytes");
    let idle = Sampler::start(metrics, "kafka_gateway_frame_pool_idle_bytes");
    let addr = gw.addr;
    let request = Arc::new(frame(18, 0, 1, b"pool", false, &vec![0u8; 1 << 20]));
    let (_, handles) = attackers(108, Duration::from_secs(8), move |i, stop| {
        while !stop.load(Ordering::Relaxed) {
            let Some(mut s) = try_connect(addr) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if i < 8 {
                // Fast: the whole request at once, its answer, then the next connection.
                if s.write_all(&request).is_ok() {
                    let _ = read_frame(&mut s, 1 << 20);
                }
            } else {
                // Slow: 8 KiB, then 4 KiB every 100 ms (closed at the read deadline).
                trickle(&mut s, &request[..8192], 8192, Duration::ZERO, stop);
                trickle(
                    &mut s,
                    &request[8192..],
                    4096,
                    Duration::from_millis(100),
                    stop,
                );
            }
        }
    });
    for h in handles {
        h.join().unwrap();
    }
    let (ahead, idle) = (ahead.finish(), idle.finish());
    eprintln!("most lent ahead {ahead} bytes, most idle {idle} bytes");
    assert!(
        ahead > 0.0 && ahead <= POOL && idle <= POOL,
        "kept buffers: {ahead} bytes lent ahead of leases and {idle} idle at most, bound {POOL}"
    );
    assert_survived(
        &mut gw,
        prober,
        "100 slow and 8 fast senders of 1 MiB requests",
    );
}

#[test]
fn read_buffers_kept_after_a_burst_are_freed_once_idle() {
    // After a burst of large requests the gateway keeps their read buffers (up to
    // `frame_pool_bytes`) for the next ones. A client that sends such a burst and stops
    // must not leave that memory resident for good: buffers idle for
    // `frame_pool_idle_ms` (1 s here) are freed, not before.
    const MIB: f64 = 1024.0 * 1024.0;
    let _turn = my_turn();
    let metrics = free_addr();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[
            ("IGGY_KAFKA_FRAME_POOL_IDLE_MS", "1000"),
            ("IGGY_KAFKA_METRICS_ADDR", &metrics.to_string()),
        ],
    ) else {
        return;
    };
    let addr = gw.addr;
    let request = Arc::new(frame(18, 0, 1, b"pool", false, &vec![0u8; 1 << 20]));
    // Eight connections at once, two requests each: several buffers in use together.
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                let mut s = connect(addr).unwrap();
                for _ in 0..2 {
                    s.write_all(&request).unwrap();
                    read_frame(&mut s, 1 << 20).unwrap();
                }
            })
        })
        .collect();
    for h in burst {
        h.join().unwrap();
    }
    let answered = Instant::now();
    let kept = gauge(metrics, "kafka_gateway_frame_pool_idle_bytes").unwrap();
    assert!(kept >= MIB, "{kept} bytes kept after the burst");
    let freed_after = loop {
        let idle = gauge(metrics, "kafka_gateway_frame_pool_idle_bytes").unwrap();
        if idle == 0.0 {
            break answered.elapsed();
        }
        assert!(
            answered.elapsed() < Duration::from_secs(10),
            "{idle} bytes still kept 10 s after the burst"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("{kept} bytes kept after the burst, freed after {freed_after:?}");
    assert!(
        freed_after >= Duration::from_millis(500),
        "freed {freed_after:?} after the burst, before their idle time"
    );
    // The pool still lends: a new request is answered and its buffer kept again.
    let mut s = connect(addr).unwrap();
    s.write_all(&request).unwrap();
    read_frame(&mut s, 1 << 20).unwrap();
    let again = gauge(metrics, "kafka_gateway_frame_pool_idle_bytes").unwrap();
    assert!(again >= MIB, "{again} bytes kept after the next request");
    assert!(gw.is_running(), "the gateway exited");
}

/// Metadata v1 for `wide` (auto-created with 300 partitions: ~10 KiB answers).
fn metadata_wide(corr: i32) -> Vec<u8> {
    let mut body = 1i32.to_be_bytes().to_vec();
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(b"wide");
    frame(METADATA, 1, corr, b"deaf", false, &body)
}

/// Fetch v4 of all 300 partitions of `wide` from offset 0, without waiting.
fn fetch_wide(corr: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(-1i32).to_be_bytes()); // replica id
    body.extend_from_slice(&0i32.to_be_bytes()); // max wait
    body.extend_from_slice(&0i32.to_be_bytes()); // min bytes
    body.extend_from_slice(&(64i32 << 20).to_be_bytes()); // max bytes
    body.push(0); // isolation level
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(b"wide");
    body.extend_from_slice(&300i32.to_be_bytes());
    for p in 0..300i32 {
        body.extend_from_slice(&p.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&(1i32 << 20).to_be_bytes());
    }
    frame(FETCH, 4, corr, b"deaf", false, &body)
}

#[test]
fn clients_that_never_read_their_responses() {
    let _turn = my_turn();
    let metrics = free_addr();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "300"),
            ("IGGY_KAFKA_WRITE_TIMEOUT_SECS", "4"),
            (
                "IGGY_KAFKA_MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION",
                "16384",
            ),
            ("IGGY_KAFKA_METRICS_ADDR", &metrics.to_string()),
        ],
    ) else {
        return;
    };
    let queued = Sampler::start(metrics, "kafka_gateway_response_memory_queued_bytes");
    // Create the topic first (a Metadata v1 request auto-creates it).
    let mut c = connect(gw.addr).unwrap();
    c.write_all(&metadata_wide(1)).unwrap();
    read_frame(&mut c, 16 << 20).expect("metadata for wide");
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let addr = gw.addr;
    let requests: Arc<Vec<u8>> = Arc::new(
        (0..400)
            .flat_map(|i| {
                if i % 2 == 0 {
                    metadata_wide(i)
                } else {
                    fetch_wide(i)
                }
            })
            .collect(),
    );
    // Ten connections pipeline 400 requests each (about 4 MiB of answers per
    // connection) and read nothing; the gateway's write timeout closes them and they
    // come back. (What the kernel's socket buffers take is sent; past that, each
    // connection's queue stops at its bound and the connection is not served further.)
    let (_, handles) = attackers(10, Duration::from_secs(10), move |_, stop| {
        while !stop.load(Ordering::Relaxed) {
            let Some(mut s) = try_connect(addr) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
            let mut sent = 0;
            while sent < requests.len() && !stop.load(Ordering::Relaxed) {
                match s.write(&requests[sent..]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    // The write timed out (the gateway stopped reading) or failed.
                    Err(_) if closed_within(&mut s, Duration::from_millis(1)) => break,
                    Err(_) => {}
                }
            }
            while !stop.load(Ordering::Relaxed)
                && !closed_within(&mut s, Duration::from_millis(200))
            {}
        }
    });
    for h in handles {
        h.join().unwrap();
    }
    // Each connection's queue stops at its bound (16 KiB here) plus the response that
    // crossed it (about 12 KiB); a queue of 16 responses would hold some 190 KiB.
    let most = queued.finish();
    let bound = 10 * 40 * 1024;
    assert!(
        most > 0.0 && most <= bound as f64,
        "queued response bytes peaked at {most} (bound {bound})"
    );
    eprintln!("queued response bytes peaked at {most}");
    assert_survived(&mut gw, prober, "10 clients that never read");
}

/// Opens `n` connections and asks ApiVersions on each; how many were answered (the rest
/// were closed right after accept). The connections stay open until returned.
fn flood(addr: SocketAddr, n: usize) -> (usize, Vec<TcpStream>) {
    let mut open = Vec::new();
    for i in 0..n {
        if let Some(mut s) = try_connect(addr) {
            let _ = s.write_all(&api_versions(i as i32));
            open.push(s);
        }
    }
    let mut answered = 0;
    for s in &mut open {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut size = [0u8; 4];
        if s.read_exact(&mut size).is_ok() {
            answered += 1;
        }
    }
    (answered, open)
}

/// Lines of the gateway's log that report refused connections.
fn refusal_lines(gw: &Gateway) -> usize {
    gw.output(100_000)
        .lines()
        .filter(|l| l.contains("connection limit reached"))
        .count()
}

#[test]
fn a_flood_past_the_per_ip_limit() {
    let _turn = my_turn();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[("IGGY_KAFKA_MAX_CONNECTIONS_PER_IP", "20")],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(200));
    // The prober holds one of the address's 20.
    let (answered, open) = flood(gw.addr, 300);
    assert_eq!(answered, 19, "connections served past the per-IP limit");
    let lines = refusal_lines(&gw);
    assert!(
        (1..=2).contains(&lines),
        "{lines} log lines for 281 refused connections"
    );
    drop(open);
    assert_survived(
        &mut gw,
        prober,
        "300 connections against a per-IP limit of 20",
    );
}

#[test]
fn a_flood_past_the_total_limit() {
    let _turn = my_turn();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[
            ("IGGY_KAFKA_MAX_CONNECTIONS", "40"),
            (
                "IGGY_KAFKA_MAX_CONNECTIONS_PER_IP_OVERRIDES",
                "127.0.0.1:1000",
            ),
        ],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(200));
    let (answered, open) = flood(gw.addr, 300);
    assert_eq!(answered, 39, "connections served past the total limit");
    assert!(refusal_lines(&gw) <= 2, "refusals are logged in bulk");
    drop(open);
    assert_survived(
        &mut gw,
        prober,
        "300 connections against a total limit of 40",
    );
}

#[test]
fn a_flood_past_the_connection_creation_rate() {
    let _turn = my_turn();
    let Some(mut gw) = Gateway::attack(
        "attack_connections",
        &[("IGGY_KAFKA_MAX_CONNECTION_CREATION_RATE", "20")],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    // Let the bucket fill up again after the prober's connection.
    std::thread::sleep(Duration::from_millis(1100));
    let started = Instant::now();
    let (answered, open) = flood(gw.addr, 100);
    let took = started.elapsed();
    // 20 at once, then 20 per second: the last of 100 is accepted after about 4 s.
    assert_eq!(answered, 100, "every connection is served, later");
    assert!(
        took >= Duration::from_secs(3),
        "100 connections served in {took:?} at 20 per second"
    );
    drop(open);
    assert_survived(
        &mut gw,
        prober,
        "100 connections at a creation rate of 20/s",
    );
}
