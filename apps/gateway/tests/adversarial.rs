//! Hostile and broken peers against the gateway binary, over raw TCP (no Kafka client).
//!
//! Every test starts its own gateway on `127.0.0.1:0` (the port comes from the listen line on
//! its stdout), abuses one connection, checks the gateway's reaction (mostly: the connection
//! is closed), then checks that a fresh connection still gets a proper ApiVersions answer at
//! v0, v1, v2 and v3: the server keeps serving.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::Gateway;

/// How long a test waits for the gateway to react before calling it a failure (a bound so a
/// broken gateway cannot hang the test run, not a performance expectation).
const PATIENCE: Duration = Duration::from_secs(20);

/// Lines of the gateway log shown with a failure.
const LOG_LINES: usize = 40;

const API_VERSIONS: i16 = 18;
const METADATA: i16 = 3;
const UNSUPPORTED_VERSION: i16 = 35;

// ---- the gateway process ---------------------------------------------------------------

/// Raw-TCP access to a [`Gateway`] started by the shared harness.
trait RawPeer {
    /// A fresh connection with [`PATIENCE`] as its read and write timeouts.
    fn connect(&self) -> TcpStream;
    /// The gateway is still alive and a fresh connection gets proper ApiVersions answers at
    /// v0 to v3.
    fn assert_still_serving(&mut self, after: &str);
}

impl RawPeer for Gateway {
    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect_timeout(&self.addr, PATIENCE).unwrap_or_else(|e| {
            panic!("connect to {}: {e}\n{}", self.addr, self.output(LOG_LINES))
        });
        s.set_read_timeout(Some(PATIENCE))
            .expect("set read timeout");
        s.set_write_timeout(Some(PATIENCE))
            .expect("set write timeout");
        s.set_nodelay(true).expect("set nodelay");
        s
    }

    fn assert_still_serving(&mut self, after: &str) {
        if let Some(status) = self.exit_status() {
            panic!(
                "the gateway died ({status}) after {after}\n{}",
                self.output(LOG_LINES)
            );
        }
        let mut s = self.connect();
        for version in 0..=3 {
            let corr = 1000 + i32::from(version);
            send(&mut s, &api_versions_request(version, corr));
            let Some(body) = read_response(&mut s) else {
                panic!(
                    "after {after}: a fresh connection got no ApiVersions v{version} answer\n{}",
                    self.output(LOG_LINES)
                )
            };
            let r = parse_api_versions(&body, version)
                .unwrap_or_else(|e| panic!("after {after}: ApiVersions v{version}: {e}"));
            assert_eq!(
                r.correlation_id, corr,
                "after {after}: ApiVersions v{version}"
            );
            assert_eq!(
                r.error_code, 0,
                "after {after}: ApiVersions v{version} error"
            );
            r.assert_core_keys(&format!("after {after}: ApiVersions v{version}"));
        }
    }
}

// ---- hand-built requests and responses ---------------------------------------------------

/// A request frame: size prefix, header v1 (api key, version, correlation id, client id),
/// plus the header's empty tagged-field section when `flexible` (header v2), then `body`.
fn request(key: i16, version: i16, corr: i32, flexible: bool, body: &[u8]) -> Vec<u8> {
    support::attack::frame(key, version, corr, b"adversarial", flexible, body)
}

/// ApiVersions at `version`: v0-v2 have an empty body; v3+ are flexible (header v2) with
/// client_software_name and client_software_version (compact strings) and no tagged fields.
fn api_versions_request(version: i16, corr: i32) -> Vec<u8> {
    if version >= 3 {
        let mut body = Vec::new();
        for s in [&b"adversarial-test"[..], b"1.0"] {
            body.push(s.len() as u8 + 1);
            body.extend_from_slice(s);
        }
        body.push(0);
        request(API_VERSIONS, version, corr, true, &body)
    } else {
        request(API_VERSIONS, version, corr, false, &[])
    }
}

fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).expect("write to the gateway");
    s.flush().expect("flush");
}

/// One response frame (without its size prefix), or `None` when the connection ends first.
fn read_response(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    match s.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if is_closed(&e) => return None,
        Err(e) => panic!("reading a response size: {e}"),
    }
    let size = i32::from_be_bytes(size);
    assert!(
        (0..=16 * 1024 * 1024).contains(&size),
        "response size {size} out of range"
    );
    let mut body = vec![0u8; size as usize];
    match s.read_exact(&mut body) {
        Ok(()) => Some(body),
        Err(e) if is_closed(&e) => None,
        Err(e) => panic!("reading a response of {size} bytes: {e}"),
    }
}

fn is_closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
    )
}

/// Waits until the gateway closes the connection; returns whatever it sent before that.
/// Fails when the connection is still open after PATIENCE.
fn expect_closed(s: &mut TcpStream, what: &str, gw: &Gateway) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + PATIENCE;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if is_closed(&e) => return seen,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("{what}: reading from the gateway: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the gateway did not close the connection within {PATIENCE:?} \
             (received {} bytes)\n{}",
            seen.len(),
            gw.output(LOG_LINES)
        );
    }
}

struct ApiVersionsResponse {
    correlation_id: i32,
    error_code: i16,
    /// (api key, min version, max version)
    keys: Vec<(i16, i16, i16)>,
}

impl ApiVersionsResponse {
    fn assert_core_keys(&self, what: &str) {
        let find = |k: i16| self.keys.iter().find(|(key, _, _)| *key == k);
        let av = find(API_VERSIONS).unwrap_or_else(|| panic!("{what}: no ApiVersions key"));
        assert!(
            av.1 == 0 && av.2 >= 3,
            "{what}: ApiVersions range {}..={}",
            av.1,
            av.2
        );
        for key in [0, 1, 2, METADATA] {
            let k = find(key).unwrap_or_else(|| panic!("{what}: api key {key} not listed"));
            assert!(k.1 <= k.2, "{what}: api key {key} range {}..={}", k.1, k.2);
        }
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at + n;
        if end > self.buf.len() {
            return Err(format!(
                "truncated at byte {} (wanted {n} more of {})",
                self.at,
                self.buf.len()
            ));
        }
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn i16(&mut self) -> Result<i16, String> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn uvarint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("unsigned varint too long".into())
    }
    fn skip_tags(&mut self) -> Result<(), String> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// An ApiVersions response body (after the size prefix) shaped as `version` (header v0
/// always); every byte must be accounted for.
fn parse_api_versions(buf: &[u8], version: i16) -> Result<ApiVersionsResponse, String> {
    let mut c = Cursor { buf, at: 0 };
    let correlation_id = c.i32()?;
    let error_code = c.i16()?;
    let mut keys = Vec::new();
    if version >= 3 {
        let n = c.uvarint()?;
        if n == 0 {
            return Err("null api_keys array".into());
        }
        for _ in 0..n - 1 {
            keys.push((c.i16()?, c.i16()?, c.i16()?));
            c.skip_tags()?;
        }
        let _throttle = c.i32()?;
        c.skip_tags()?;
    } else {
        let n = c.i32()?;
        if n < 0 {
            return Err(format!("api_keys count {n}"));
        }
        for _ in 0..n {
            keys.push((c.i16()?, c.i16()?, c.i16()?));
        }
        if version >= 1 {
            let _throttle = c.i32()?;
        }
    }
    if c.at != buf.len() {
        return Err(format!(
            "{} trailing bytes after a v{version} body",
            buf.len() - c.at
        ));
    }
    Ok(ApiVersionsResponse {
        correlation_id,
        error_code,
        keys,
    })
}

// ---- the tests ---------------------------------------------------------------------------

#[test]
fn fresh_gateway_answers_api_versions_v0_to_v3() {
    let Some(mut gw) = Gateway::attack("adversarial", &[]) else {
        return;
    };
    gw.assert_still_serving("start-up");
}

#[test]
fn oversized_frame_size_is_closed() {
    let Some(mut gw) = Gateway::attack("adversarial", &[("IGGY_KAFKA_MAX_FRAME_SIZE", "4096")])
    else {
        return;
    };
    for size in [4097i32, 64 * 1024 * 1024, i32::MAX] {
        let mut s = gw.connect();
        send(&mut s, &size.to_be_bytes());
        let what = format!("size prefix {size} > IGGY_KAFKA_MAX_FRAME_SIZE=4096");
        let seen = expect_closed(&mut s, &what, &gw);
        assert!(
            seen.is_empty(),
            "{what}: got {} bytes before the close",
            seen.len()
        );
        gw.assert_still_serving(&what);
    }
    // a frame of exactly the maximum is not refused for its size
    let mut s = gw.connect();
    let mut frame = api_versions_request(0, 7);
    let pad = 4096 - (frame.len() - 4);
    frame.extend(std::iter::repeat_n(0u8, pad));
    frame[..4].copy_from_slice(&4096i32.to_be_bytes());
    send(&mut s, &frame);
    // ApiVersions v0 with trailing bytes may be answered or refused; only the size matters
    // here: the gateway must have read the whole frame and still be serving.
    let _ = read_response(&mut s);
    drop(s);
    gw.assert_still_serving("a frame of exactly IGGY_KAFKA_MAX_FRAME_SIZE");
}

#[test]
fn negative_frame_size_is_closed() {
    let Some(mut gw) = Gateway::attack("adversarial", &[]) else {
        return;
    };
    for size in [-1i32, i32::MIN] {
        let mut s = gw.connect();
        send(&mut s, &size.to_be_bytes());
        let what = format!("negative size prefix {size}");
        let seen = expect_closed(&mut s, &what, &gw);
        assert!(
            seen.is_empty(),
            "{what}: got {} bytes before the close",
            seen.len()
        );
        gw.assert_still_serving(&what);
    }
}

#[test]
fn truncated_frame_then_silence_is_closed_after_read_timeout() {
    let Some(mut gw) = Gateway::attack("adversarial", &[("IGGY_KAFKA_READ_TIMEOUT_SECS", "1")])
    else {
        return;
    };
    // a size prefix announcing 100 bytes, then only the start of an ApiVersions header
    let mut s = gw.connect();
    let frame = api_versions_request(0, 1);
    let mut partial = 100i32.to_be_bytes().to_vec();
    partial.extend_from_slice(&frame[4..14]);
    send(&mut s, &partial);
    let what = "a truncated frame (10 of 100 bytes) then silence";
    let seen = expect_closed(&mut s, what, &gw);
    assert!(
        seen.is_empty(),
        "{what}: got {} bytes before the close",
        seen.len()
    );
    // half a size prefix is a truncated frame too
    let mut s = gw.connect();
    send(&mut s, &[0, 0]);
    expect_closed(&mut s, "half a size prefix then silence", &gw);
    gw.assert_still_serving(what);
}

#[test]
fn unknown_api_key_is_closed() {
    let Some(mut gw) = Gateway::attack("adversarial", &[]) else {
        return;
    };
    for key in [9999i16, i16::MAX, -1] {
        let mut s = gw.connect();
        send(&mut s, &request(key, 0, 42, false, &[0, 0, 0, 0]));
        let what = format!("unknown api key {key}");
        let seen = expect_closed(&mut s, &what, &gw);
        assert!(seen.is_empty(), "{what}: got a {}-byte answer", seen.len());
        gw.assert_still_serving(&what);
    }
}

#[test]
fn unsupported_version_of_a_known_api_is_closed() {
    let Some(mut gw) = Gateway::attack("adversarial", &[]) else {
        return;
    };
    for (key, name) in [(METADATA, "Metadata"), (0, "Produce"), (1, "Fetch")] {
        let mut s = gw.connect();
        send(&mut s, &request(key, 99, 43, true, &[0, 0, 0, 0]));
        let what = format!("{name} v99");
        let seen = expect_closed(&mut s, &what, &gw);
        assert!(seen.is_empty(), "{what}: got a {}-byte answer", seen.len());
        gw.assert_still_serving(&what);
    }
    let mut s = gw.connect();
    send(&mut s, &request(METADATA, -1, 44, false, &[]));
    expect_closed(&mut s, "Metadata v-1", &gw);
    gw.assert_still_serving("Metadata v-1");
}

#[test]
fn api_versions_v99_gets_a_v0_shaped_unsupported_version_answer() {
    let Some(mut gw) = Gateway::attack("adversarial", &[]) else {
        return;
    };
    let mut s = gw.connect();
    // as a client from the future would send it: flexible header and a v3-like body
    let mut body = Vec::new();
    for part in [&b"future-client"[..], b"9.9"] {
        body.push(part.len() as u8 + 1);
        body.extend_from_slice(part);
    }
    body.push(0);
    send(&mut s, &request(API_VERSIONS, 99, 4242, true, &body));
    let Some(resp) = read_response(&mut s) else {
        panic!(
            "ApiVersions v99: connection closed without an answer\n{}",
            gw.output(LOG_LINES)
        )
    };
    let r = parse_api_versions(&resp, 0).unwrap_or_else(|e| {
        panic!(
            "ApiVersions v99: the answer is not a v0-shaped ApiVersions body: {e}; bytes {:02x?}",
            resp
        )
    });
    assert_eq!(r.correlation_id, 4242, "ApiVersions v99: correlation id");
    assert_eq!(
        r.error_code, UNSUPPORTED_VERSION,
        "ApiVersions v99: error code"
    );
    assert!(!r.keys.is_empty(), "ApiVersions v99: empty api key list");
    r.assert_core_keys("ApiVersions v99");
    // the client then retries on the same connection at a version both know
    send(&mut s, &api_versions_request(3, 4243));
    let resp = read_response(&mut s)
        .unwrap_or_else(|| panic!("ApiVersions v3 after v99: connection closed"));
    let r =
        parse_api_versions(&resp, 3).unwrap_or_else(|e| panic!("ApiVersions v3 after v99: {e}"));
    assert_eq!(
        (r.correlation_id, r.error_code),
        (4243, 0),
        "ApiVersions v3 after v99"
    );
    r.assert_core_keys("ApiVersions v3 after v99");
    drop(s);
    gw.assert_still_serving("ApiVersions v99");
}

#[test]
fn connections_past_max_connections_are_closed() {
    const MAX: usize = 4;
    let Some(mut gw) = Gateway::attack("adversarial", &[("IGGY_KAFKA_MAX_CONNECTIONS", "4")])
    else {
        return;
    };
    // MAX connections, each proven live (and so counted) by an ApiVersions round trip
    let mut held = Vec::new();
    for i in 0..MAX {
        let mut s = gw.connect();
        send(&mut s, &api_versions_request(0, i as i32));
        let body = read_response(&mut s).unwrap_or_else(|| {
            panic!(
                "connection {} of {MAX} was closed\n{}",
                i + 1,
                gw.output(LOG_LINES)
            )
        });
        let r = parse_api_versions(&body, 0).unwrap();
        assert_eq!((r.correlation_id, r.error_code), (i as i32, 0));
        held.push(s);
    }
    // every further connection is closed (it may be accepted first), without an answer
    for extra in 0..MAX {
        let Ok(mut s) = TcpStream::connect_timeout(&gw.addr, PATIENCE) else {
            continue; // refused outright: also fine
        };
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        // the request may fail to go out if the gateway already closed the socket
        let _ = s.write_all(&api_versions_request(0, 100 + extra as i32));
        let what = format!(
            "connection {} with IGGY_KAFKA_MAX_CONNECTIONS=4",
            MAX + extra + 1
        );
        let seen = expect_closed(&mut s, &what, &gw);
        assert!(seen.is_empty(), "{what}: got a {}-byte answer", seen.len());
    }
    // the held connections still work
    for (i, s) in held.iter_mut().enumerate() {
        send(s, &api_versions_request(1, 200 + i as i32));
        let body = read_response(s).unwrap_or_else(|| {
            panic!(
                "held connection {} closed by the flood\n{}",
                i + 1,
                gw.output(LOG_LINES)
            )
        });
        let r = parse_api_versions(&body, 1).unwrap();
        assert_eq!((r.correlation_id, r.error_code), (200 + i as i32, 0));
    }
    // once they are gone, new connections are served again (the count drops as the gateway
    // notices the closes: retry for a while)
    drop(held);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut s = gw.connect();
        send(&mut s, &api_versions_request(0, 300));
        if read_response(&mut s).is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served after the held ones closed\n{}",
            gw.output(LOG_LINES)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    gw.assert_still_serving("a connection flood");
}

#[test]
fn a_frame_trickling_in_is_closed_at_its_read_deadline() {
    // One deadline covers the whole frame: bytes arriving now and then must not keep a
    // half-sent request open (a slow-loris client). The frame announces 100 bytes and
    // then sends one byte every 200 ms, which would take 20 s to complete.
    let Some(mut gw) = Gateway::attack("adversarial", &[("IGGY_KAFKA_READ_TIMEOUT_SECS", "1")])
    else {
        return;
    };
    let mut s = gw.connect();
    send(&mut s, &100i32.to_be_bytes());
    let started = Instant::now();
    let mut closed = false;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(&[0]).and_then(|()| s.flush()).is_err() {
            closed = true;
            break;
        }
        // A closed peer may still accept a write or two; a read tells for sure.
        s.set_nonblocking(true).expect("nonblocking");
        let mut b = [0u8; 1];
        let read = s.read(&mut b);
        s.set_nonblocking(false).expect("blocking");
        match read {
            Ok(0) => {
                closed = true;
                break;
            }
            Err(e) if is_closed(&e) => {
                closed = true;
                break;
            }
            _ => {}
        }
        if started.elapsed() > PATIENCE {
            break;
        }
    }
    assert!(
        closed,
        "a frame trickling in was still open after {:?}\n{}",
        started.elapsed(),
        gw.output(LOG_LINES)
    );
    gw.assert_still_serving("a trickling frame");
}

// ---- the observability endpoint ---------------------------------------------------------

/// `GET path` on the HTTP endpoint: the status code, `None` when the connection ended
/// without one.
fn http_status(addr: std::net::SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, PATIENCE).ok()?;
    s.set_read_timeout(Some(PATIENCE)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split(' ').nth(1)?.parse().ok()
}

fn metrics_gateway() -> (Gateway, std::net::SocketAddr) {
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // Its own gateway even in a soak run: the metrics address is the test's.
    let gw = Gateway::start(&[("IGGY_KAFKA_METRICS_ADDR", &http.to_string())]);
    (gw, http)
}

#[test]
fn the_metrics_endpoint_refuses_what_it_does_not_serve() {
    let (mut gw, http) = metrics_gateway();
    // Methods other than GET/HEAD.
    let mut s = TcpStream::connect(http).unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    // A head that never ends: refused at 8 KiB.
    let mut s = TcpStream::connect(http).unwrap();
    let _ = s.write_all(&vec![b'a'; 64 * 1024]);
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    assert!(
        String::from_utf8_lossy(&r).starts_with("HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // Silent connections beyond the concurrency bound: closed after the head timeout, and
    // a scrape gets through again.
    let silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(http).unwrap()).collect();
    let deadline = Instant::now() + PATIENCE;
    while http_status(http, "/health") != Some(200) {
        assert!(Instant::now() < deadline, "/health never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(silent);
    assert_eq!(http_status(http, "/health"), Some(200));
    gw.assert_still_serving("abuse of the metrics endpoint");
}

/// `GET /metrics` with `authorization` (a whole header value, if any): the status code
/// and the body, `None` when the connection ended without an answer.
fn scrape_with(addr: std::net::SocketAddr, authorization: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, PATIENCE).ok()?;
    s.set_read_timeout(Some(PATIENCE)).ok()?;
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw.split(' ').nth(1)?.parse().ok()?;
    Some((status, raw))
}

#[test]
fn the_metrics_token_holds_against_guessing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::scratch_dir("metrics-token");
    let file = dir.join("token");
    let token = "metrics-token-0123456789abcdef";
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut gw = Gateway::start(&[
        ("IGGY_KAFKA_METRICS_ADDR", &http.to_string()),
        (
            "IGGY_KAFKA_METRICS_BEARER_TOKEN_FILE",
            &file.to_string_lossy(),
        ),
    ]);
    let deadline = Instant::now() + PATIENCE;
    while http_status(http, "/health") != Some(200) {
        assert!(Instant::now() < deadline, "/health never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    // No token, a wrong one, the right one in the wrong scheme: 401, no metric shown.
    for auth in [None, Some("Bearer wrong"), Some(&*format!("Basic {token}"))] {
        let (status, body) = scrape_with(http, auth).expect("an answer");
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains("kafka_gateway_"), "{body}");
    }
    // Guesses in parallel, beyond the endpoint's connection bound: refused or dropped,
    // never served.
    let guesses: Vec<_> = (0..48)
        .map(|i| {
            std::thread::spawn(move || {
                scrape_with(
                    http,
                    Some(&format!("Bearer metrics-token-0123456789abcd{i:02}")),
                )
            })
        })
        .collect();
    for g in guesses {
        if let Some((status, body)) = g.join().unwrap() {
            assert_eq!(status, 401, "{body}");
        }
    }
    // The right token is served, and probes need none.
    let (status, body) = scrape_with(http, Some(&format!("Bearer {token}"))).expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("kafka_gateway_"), "{body}");
    assert_eq!(http_status(http, "/health"), Some(200));
    gw.assert_still_serving("guessing the metrics token");
}

#[test]
fn a_scrape_flood_does_not_stop_kafka_clients() {
    let (mut gw, http) = metrics_gateway();
    // 8 threads scraping back to back while Kafka clients keep being answered.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scrapers: Vec<_> = (0..8)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 500 {
                    let _ = http_status(http, "/metrics");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        gw.assert_still_serving("during a scrape flood");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let scrapes: u32 = scrapers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(scrapes > 0);
    assert_eq!(http_status(http, "/metrics"), Some(200));
}

// ---- refused TLS handshakes ---------------------------------------------------------------

#[test]
fn a_refused_client_certificate_is_logged_with_the_peer_and_the_reason() {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    let ca = test_support::certs::TestCa::default();
    let dir = support::scratch_dir("refused-cert");
    let files = ca.write_server_files(&dir);
    let mut gw = Gateway::start(&[
        ("IGGY_KAFKA_TLS_ENABLED", "true"),
        ("IGGY_KAFKA_TLS_CERT_FILE", files.cert.to_str().unwrap()),
        ("IGGY_KAFKA_TLS_KEY_FILE", files.key.to_str().unwrap()),
        ("IGGY_KAFKA_TLS_CLIENT_CA_FILE", files.ca.to_str().unwrap()),
        ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true"),
    ]);
    // A client whose certificate another CA signed: the TLS stack refuses it.
    let stranger = test_support::certs::TestCa::new("a CA the gateway does not know");
    let cert = stranger.client_cert("mallory");
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
        .with_client_auth_cert(
            vec![CertificateDer::from(cert.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_der.clone())),
        )
        .unwrap(),
    );
    let addr = gw.addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A flood of them: one warning (with the count), not one per attempt.
    let local = runtime.block_on(async {
        let mut local = None;
        for _ in 0..30 {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            local.get_or_insert(tcp.local_addr().unwrap());
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(ServerName::IpAddress(addr.ip().into()), tcp)
                .await;
            // TLS 1.3: the client may finish its side before the server's alert; reading
            // then gets it.
            if let Ok(mut s) = tls {
                use tokio::io::AsyncReadExt;
                let mut b = [0u8; 1];
                let _ = tokio::time::timeout(PATIENCE, s.read(&mut b)).await;
            }
        }
        local.unwrap()
    });
    let deadline = Instant::now() + PATIENCE;
    let lines = loop {
        let lines = gw.log_matching("TLS handshake refused");
        if !lines.is_empty() || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let warned: Vec<&String> = lines.iter().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warned.len(), 1, "{lines:#?}");
    assert!(
        warned[0].contains(&local.ip().to_string()) && warned[0].contains("reason=\"handshake\""),
        "{}",
        warned[0]
    );
    // Still serving TLS: a client with the right certificate completes its handshake.
    let good = ca.client_cert("alice");
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
        .with_client_auth_cert(
            vec![CertificateDer::from(good.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(good.key_der.clone())),
        )
        .unwrap(),
    );
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio_rustls::TlsConnector::from(config)
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .expect("a known client certificate is taken");
    });
    assert!(gw.is_running());
}
