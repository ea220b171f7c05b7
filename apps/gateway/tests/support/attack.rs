//! Tools for the attack tests: hand-built request frames over raw TCP, the gateway's peak
//! memory from `/proc`, and a well-behaved client that keeps asking ApiVersions while an
//! attack runs and reports how long its answers took.
//!
//! Every attack test states three things and checks them: the gateway is still running
//! afterwards, its peak resident memory (`VmHWM`) stayed under a stated bound, and the
//! well-behaved client was answered within a stated bound the whole time.

use super::Gateway;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Kafka API keys used by the attacks.
pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const API_VERSIONS: i16 = 18;

/// A request frame: size prefix, request header v1 (v2 when `flexible`: an empty tagged
/// section follows the client id) and `body`.
pub fn frame(
    key: i16,
    version: i16,
    corr: i32,
    client_id: &[u8],
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    let mut payload = Vec::with_capacity(body.len() + 16 + client_id.len());
    payload.extend_from_slice(&key.to_be_bytes());
    payload.extend_from_slice(&version.to_be_bytes());
    payload.extend_from_slice(&corr.to_be_bytes());
    payload.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    payload.extend_from_slice(client_id);
    if flexible {
        payload.push(0);
    }
    payload.extend_from_slice(body);
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// ApiVersions v0 (empty body).
pub fn api_versions(corr: i32) -> Vec<u8> {
    frame(API_VERSIONS, 0, corr, b"probe", false, &[])
}

/// Connects with a 10 s read/write timeout.
pub fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One response frame without its size prefix; `None` when the connection ended.
pub fn read_frame(s: &mut TcpStream, max: usize) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > max {
        return None;
    }
    let mut body = vec![0u8; size as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

/// Whether the peer closed the connection (read returns 0 or a reset) within `wait`.
pub fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Sends `frames` on `connections` new connections at once (a barrier lines them up)
/// and reads `answers` answers on each with `read` (0: the connections close without
/// reading); the answers per connection.
#[allow(dead_code)]
pub fn flood_same<T: Send + 'static>(
    addr: SocketAddr,
    connections: usize,
    frames: &[u8],
    answers: usize,
    read: fn(&mut TcpStream) -> T,
) -> Vec<Vec<T>> {
    let barrier = Arc::new(std::sync::Barrier::new(connections));
    let senders: Vec<_> = (0..connections)
        .map(|_| {
            let (barrier, frames) = (barrier.clone(), frames.to_vec());
            std::thread::spawn(move || {
                let mut s = connect(addr).unwrap();
                barrier.wait();
                s.write_all(&frames).unwrap();
                (0..answers).map(|_| read(&mut s)).collect::<Vec<T>>()
            })
        })
        .collect();
    senders.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Checks the answers of one producer's batches pipelined on several connections
/// (`answers[connection][batch]`: error code and base offset): every batch landed, every
/// copy that landed reports the same offset, and the others were refused
/// `OUT_OF_ORDER_SEQUENCE_NUMBER` (a copy from a connection more than five batches
/// behind, as Kafka refuses a retry older than the batches it caches).
#[allow(dead_code)]
pub fn assert_each_batch_landed_once(answers: &[Vec<(i16, i64)>], batches: usize) {
    const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    for batch in 0..batches {
        let of: Vec<(i16, i64)> = answers.iter().map(|a| a[batch]).collect();
        let landed: Vec<i64> = of.iter().filter(|a| a.0 == 0).map(|a| a.1).collect();
        assert!(!landed.is_empty(), "batch {batch}: {of:?}");
        assert!(
            landed.windows(2).all(|w| w[0] == w[1]),
            "batch {batch}: one offset for every copy: {of:?}"
        );
        assert!(
            of.iter()
                .all(|a| a.0 == 0 || a.0 == OUT_OF_ORDER_SEQUENCE_NUMBER),
            "batch {batch}: {of:?}"
        );
    }
}

/// Peak resident set size of a process in KiB (`VmHWM` in `/proc/<pid>/status`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:")
}

/// The peak RSS bound an attack test asserts: `standalone_kib` for a gateway of its own; for
/// an external gateway that also serves other load (the soak run), the bound the run sets in
/// `IGGY_KAFKA_TEST_GATEWAY_PEAK_RSS_KIB` (none when unset).
pub fn peak_rss_bound_kib(gw: &Gateway, standalone_kib: u64) -> u64 {
    if !gw.is_external() {
        return standalone_kib;
    }
    std::env::var("IGGY_KAFKA_TEST_GATEWAY_PEAK_RSS_KIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Current resident set size of a process in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A well-behaved client: one connection (reconnecting if it is closed) sending ApiVersions
/// every `every` and recording each round trip, until stopped.
pub struct Prober {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<ProbeReport>>,
}

/// What the well-behaved client saw.
#[derive(Debug, Default, Clone)]
pub struct ProbeReport {
    /// Round trips answered.
    pub answered: usize,
    /// Requests that got no answer (timeout or closed connection).
    pub failed: usize,
    /// The slowest answer.
    pub max: Duration,
    /// All round-trip times, sorted.
    pub latencies: Vec<Duration>,
}

impl ProbeReport {
    /// The `q` quantile (0.0 to 1.0) of the round-trip times.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i]
    }

    /// Panics unless every probe was answered and the slowest within `bound`.
    pub fn assert_answered_within(&self, bound: Duration, gw: &Gateway) {
        assert!(
            self.answered > 0,
            "the well-behaved client got no answer at all\n{}",
            gw.output(40)
        );
        assert_eq!(
            self.failed,
            0,
            "the well-behaved client lost requests: {self:?}\n{}",
            gw.output(40)
        );
        assert!(
            self.max <= bound,
            "the well-behaved client waited {:?} (bound {bound:?}); p99 {:?}\n{}",
            self.max,
            self.quantile(0.99),
            gw.output(40)
        );
    }
}

impl Prober {
    /// Starts probing `addr` every `every`.
    pub fn start(addr: SocketAddr, every: Duration) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut report = ProbeReport::default();
            let mut conn: Option<TcpStream> = None;
            let mut corr = 0;
            while !flag.load(Ordering::Relaxed) {
                corr += 1;
                let started = Instant::now();
                let ok = (|| {
                    if conn.is_none() {
                        conn = connect(addr).ok();
                    }
                    let s = conn.as_mut()?;
                    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
                    s.write_all(&api_versions(corr)).ok()?;
                    let body = read_frame(s, 1 << 20)?;
                    (body.len() >= 4 && body[..4] == corr.to_be_bytes()).then_some(())
                })();
                let took = started.elapsed();
                match ok {
                    Some(()) => {
                        report.answered += 1;
                        report.max = report.max.max(took);
                        report.latencies.push(took);
                    }
                    None => {
                        report.failed += 1;
                        conn = None;
                    }
                }
                std::thread::sleep(every);
            }
            report.latencies.sort();
            report
        });
        Prober {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops probing and returns what was seen.
    pub fn finish(mut self) -> ProbeReport {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
