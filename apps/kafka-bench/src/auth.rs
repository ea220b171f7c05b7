//! `auth`: how many SASL authentications per second the broker completes.
//!
//! `--workers` tasks each loop until `--duration` is over: open a TCP connection (and a TLS
//! session on top with `--security-protocol sasl_ssl`), send ApiVersions v0, SaslHandshake
//! v1 with the mechanism and the whole exchange in SaslAuthenticate v1 requests (one for
//! PLAIN, two for SCRAM, whose server signature is checked), then close. That is what a
//! freshly started Kafka client does before its first real request. The requests are built
//! by hand (they are a few fixed fields), so the load does not depend on this project's
//! codec.
//!
//! Two latencies per login: `connect` (TCP connect to authenticated, TLS handshake
//! included) and `sasl` (SaslHandshake sent to the last SaslAuthenticate answered).
//! A failed login is counted and the worker goes on after a short pause; the broker's
//! failure delay applies to the whole run then, since every connection comes from the
//! same address, so a run with errors reports `success: false` and its rate means little.
//!
//! TLS sessions are not resumed unless `--tls-resume`: every connection pays a full
//! handshake, as a client process started anew does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

use crate::cli::{AuthArgs, SaslMechanism};
use crate::report::{Counters, Latency, Report, latency_histogram, proc_rows};
use crate::sasl_client::{SaltCache, ScramClient, plain_message, scram_hash};

/// Time allowed for each step of one login (connect, TLS, each request).
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer accepted; real SASL answers are well under 1 KiB.
const MAX_ANSWER: usize = 1 << 20;
/// Pause after a failed login before the worker tries again.
const ERROR_PAUSE: Duration = Duration::from_millis(100);
const CLIENT_ID: &[u8] = b"kafka-bench-auth";

/// What one worker did.
struct Outcome {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    connect: Histogram<u64>,
    sasl: Histogram<u64>,
}

/// What every worker shares.
struct Shared {
    args: AuthArgs,
    tls: Option<(TlsConnector, rustls::pki_types::ServerName<'static>)>,
    salts: Option<SaltCache>,
    counters: Arc<Counters>,
}

pub async fn run(args: AuthArgs) -> Result<Report, String> {
    args.security.check()?;
    if !args.security.security_protocol.uses_sasl() {
        return Err("auth needs --security-protocol sasl_plaintext or sasl_ssl".into());
    }
    if args.workers == 0 || args.duration == 0 {
        return Err("--workers and --duration must be positive".into());
    }
    let tls = if args.security.security_protocol.uses_tls() {
        Some(tls_connector(&args)?)
    } else {
        None
    };
    let counters = Arc::new(Counters::default());
    let shared = Arc::new(Shared {
        salts: (!args.no_salt_cache).then(SaltCache::default),
        tls,
        counters: counters.clone(),
        args: args.clone(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let progress =
        crate::report::spawn_progress("auth", counters.clone(), args.gateway_pid, stop.clone());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.duration);
    let mut tasks = Vec::with_capacity(args.workers);
    for id in 0..args.workers {
        let shared = shared.clone();
        tasks.push(tokio::spawn(
            async move { worker(id, &shared, deadline).await },
        ));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for t in tasks {
        outcomes.push(t.await.map_err(|e| format!("auth worker: {e}"))??);
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();

    let (mut connect, mut sasl) = (latency_histogram()?, latency_histogram()?);
    let (mut ok, mut errors, mut first_error) = (0u64, 0u64, None);
    for o in &outcomes {
        ok += o.ok;
        errors += o.errors;
        if first_error.is_none() {
            first_error.clone_from(&o.first_error);
        }
        connect
            .add(&o.connect)
            .map_err(|e| format!("histograms: {e}"))?;
        sasl.add(&o.sasl).map_err(|e| format!("histograms: {e}"))?;
    }
    let (connect, sasl) = (
        Latency::from_histogram(&connect),
        Latency::from_histogram(&sasl),
    );
    let per_sec = ok as f64 / elapsed.as_secs_f64().max(1e-9);
    let ms = |l: &Latency| {
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} ms",
            l.p50_us as f64 / 1e3,
            l.p99_us as f64 / 1e3,
            l.p999_us as f64 / 1e3,
            l.max_us as f64 / 1e3
        )
    };
    let mut rows = vec![
        ("bootstrap".into(), args.bootstrap.clone()),
        ("security".into(), args.security.describe()),
        (
            "load".into(),
            format!(
                "{} workers, {} s, TLS resumption {}, client salt cache {}",
                args.workers,
                args.duration,
                if args.tls_resume { "on" } else { "off" },
                if args.no_salt_cache { "off" } else { "on" }
            ),
        ),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        ("authentications".into(), ok.to_string()),
        ("errors".into(), errors.to_string()),
        ("auth/s".into(), format!("{per_sec:.0}")),
        ("connect+auth p50/p99/p999/max".into(), ms(&connect)),
        ("sasl only p50/p99/p999/max".into(), ms(&sasl)),
    ];
    if let Some(e) = &first_error {
        rows.push(("first error".into(), e.clone()));
    }
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "auth",
        "bootstrap": args.bootstrap,
        "security": args.security.describe(),
        "mechanism": args.security.sasl_mechanism.map(SaslMechanism::name),
        "workers": args.workers,
        "duration_requested_secs": args.duration,
        "tls_resume": args.tls_resume,
        "client_salt_cache": !args.no_salt_cache,
        "elapsed_secs": elapsed.as_secs_f64(),
        "authentications": ok,
        "errors": errors,
        "first_error": first_error,
        "auth_per_sec": per_sec,
        "connect_latency": connect,
        "sasl_latency": sasl,
        "broker": measured.broker,
        "client_cpu_secs": measured.client_cpu_secs,
    });
    Ok(Report {
        title: "kafka-bench auth".into(),
        rows,
        json,
        json_path: args.json.clone(),
        success: errors == 0 && ok > 0,
    })
}

/// The TLS client: roots from `--ssl-ca-location` (or none: then the broker's certificate
/// cannot be verified and every login fails, which the report says).
fn tls_connector(
    args: &AuthArgs,
) -> Result<(TlsConnector, rustls::pki_types::ServerName<'static>), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    let ca = args
        .security
        .ssl_ca_location
        .as_ref()
        .ok_or("auth over TLS needs --ssl-ca-location")?;
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    // An explicit provider: the workspace may enable more than one in rustls.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !args.tls_resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let host = match &args.tls_server_name {
        Some(h) => h.clone(),
        None => host_of(&args.bootstrap).to_string(),
    };
    let name =
        ServerName::try_from(host.clone()).map_err(|e| format!("TLS server name {host:?}: {e}"))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}

/// The host part of HOST:PORT or [IPv6]:PORT.
fn host_of(bootstrap: &str) -> &str {
    let host = bootstrap.rsplit_once(':').map_or(bootstrap, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

async fn worker(id: usize, shared: &Shared, deadline: Instant) -> Result<Outcome, String> {
    let mut out = Outcome {
        ok: 0,
        errors: 0,
        first_error: None,
        connect: latency_histogram()?,
        sasl: latency_histogram()?,
    };
    let mut correlation = 0i32;
    while Instant::now() < deadline {
        let t0 = Instant::now();
        match login(shared, &mut correlation).await {
            Ok(sasl_time) => {
                let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
                out.connect.saturating_record(us(t0.elapsed()));
                out.sasl.saturating_record(us(sasl_time));
                out.ok += 1;
                shared.counters.add(1, 0);
            }
            Err(e) => {
                out.errors += 1;
                shared.counters.error();
                out.first_error
                    .get_or_insert_with(|| format!("worker {id}: {e}"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    Ok(out)
}

/// One login on a new connection; returns the time the SASL part took.
async fn login(shared: &Shared, correlation: &mut i32) -> Result<Duration, String> {
    let tcp = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(&shared.args.bootstrap))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true)
        .map_err(|e| format!("socket options: {e}"))?;
    match &shared.tls {
        None => exchange(tcp, shared, correlation).await,
        Some((connector, name)) => {
            let tls = tokio::time::timeout(IO_TIMEOUT, connector.connect(name.clone(), tcp))
                .await
                .map_err(|_| "TLS handshake timed out".to_string())?
                .map_err(|e| format!("TLS handshake: {e}"))?;
            exchange(tls, shared, correlation).await
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    shared: &Shared,
    correlation: &mut i32,
) -> Result<Duration, String> {
    let sec = &shared.args.security;
    let mechanism = sec.sasl_mechanism.ok_or("no SASL mechanism")?;
    let (user, password) = match (&sec.sasl_username, &sec.sasl_password) {
        (Some(u), Some(p)) => (u.as_str(), p.as_str()),
        _ => return Err("no SASL username or password".into()),
    };
    // ApiVersions v0: empty body.
    let answer = call(&mut s, 18, 0, &[], correlation).await?;
    let mut r = Reader(&answer);
    check_code("ApiVersions", r.i16()?)?;

    let t0 = Instant::now();
    let mut body = Vec::new();
    put_string(&mut body, mechanism.name());
    let answer = call(&mut s, 17, 1, &body, correlation).await?;
    check_code("SaslHandshake", Reader(&answer).i16()?)?;

    match scram_hash(mechanism) {
        None => {
            authenticate(&mut s, &plain_message(user, password), correlation).await?;
        }
        Some(hash) => {
            let mut scram = ScramClient::new(hash, user, password, &ScramClient::random_nonce()?);
            let server_first = authenticate(&mut s, &scram.client_first(), correlation).await?;
            let client_final = scram.client_final(&server_first, shared.salts.as_ref())?;
            let server_final = authenticate(&mut s, &client_final, correlation).await?;
            scram.verify_server_final(&server_final)?;
        }
    }
    let took = t0.elapsed();
    let _ = s.shutdown().await;
    Ok(took)
}

/// One SaslAuthenticate v1 round trip; returns the server's bytes.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    token: &[u8],
    correlation: &mut i32,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::with_capacity(4 + token.len());
    let len = i32::try_from(token.len()).map_err(|_| "token too large")?;
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(token);
    let answer = call(s, 36, 1, &body, correlation).await?;
    let mut r = Reader(&answer);
    let code = r.i16()?;
    let message = r.nullable_string()?;
    if code != 0 {
        return Err(format!(
            "SaslAuthenticate error code {code}{}",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ));
    }
    let bytes = r.bytes()?;
    let _session_lifetime_ms = r.i64()?;
    Ok(bytes)
}

fn check_code(api: &str, code: i16) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{api} error code {code}"))
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    // Only short fixed strings go through here (client id, mechanism names).
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

/// A request frame with header v1 (api key, version, correlation id, client id).
fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut inner = Vec::with_capacity(10 + CLIENT_ID.len() + body.len());
    inner.extend_from_slice(&api_key.to_be_bytes());
    inner.extend_from_slice(&version.to_be_bytes());
    inner.extend_from_slice(&correlation_id.to_be_bytes());
    inner.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    inner.extend_from_slice(CLIENT_ID);
    inner.extend_from_slice(body);
    let mut f = Vec::with_capacity(4 + inner.len());
    f.extend_from_slice(&(inner.len() as i32).to_be_bytes());
    f.extend_from_slice(&inner);
    f
}

/// Sends one request and returns the answer's body (after the correlation id, checked).
async fn call<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    api_key: i16,
    version: i16,
    body: &[u8],
    correlation: &mut i32,
) -> Result<Vec<u8>, String> {
    *correlation = correlation.wrapping_add(1);
    let id = *correlation;
    let io = async {
        s.write_all(&frame(api_key, version, id, body))
            .await
            .map_err(|e| format!("send api {api_key}: {e}"))?;
        s.flush()
            .await
            .map_err(|e| format!("send api {api_key}: {e}"))?;
        let mut size = [0u8; 4];
        s.read_exact(&mut size)
            .await
            .map_err(|e| format!("read answer to api {api_key}: {e}"))?;
        let size = usize::try_from(i32::from_be_bytes(size))
            .ok()
            .filter(|&n| (4..=MAX_ANSWER).contains(&n))
            .ok_or_else(|| format!("answer to api {api_key}: bad size"))?;
        let mut answer = vec![0u8; size];
        s.read_exact(&mut answer)
            .await
            .map_err(|e| format!("read answer to api {api_key}: {e}"))?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(IO_TIMEOUT, io)
        .await
        .map_err(|_| format!("api {api_key}: no answer in {IO_TIMEOUT:?}"))??;
    let got = Reader(&answer).i32()?;
    if got != id {
        return Err(format!("correlation id {got}, expected {id}"));
    }
    Ok(answer[4..].to_vec())
}

/// Big-endian reads off the front of a slice, each checked against its length.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl Reader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("answer too short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, String> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn nullable_string(&mut self) -> Result<Option<String>, String> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize)?;
        Ok(Some(String::from_utf8_lossy(b).into_owned()))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let len = usize::try_from(self.i32()?).map_err(|_| "null auth bytes")?;
        Ok(self.take(len)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn request_frame_layout() {
        let f = frame(17, 1, 9, b"\x00\x05PLAIN");
        assert_eq!(&f[..4], &((f.len() - 4) as i32).to_be_bytes());
        assert_eq!(&f[4..6], &17i16.to_be_bytes());
        assert_eq!(&f[6..8], &1i16.to_be_bytes());
        assert_eq!(&f[8..12], &9i32.to_be_bytes());
        assert_eq!(&f[12..14], &(CLIENT_ID.len() as i16).to_be_bytes());
        assert_eq!(&f[14..14 + CLIENT_ID.len()], CLIENT_ID);
        assert_eq!(&f[14 + CLIENT_ID.len()..], b"\x00\x05PLAIN");
    }

    #[test]
    fn authenticate_answer_is_parsed_and_bounded() {
        // error 0, null message, 3 auth bytes, session lifetime 1000 ms
        let mut a = vec![0, 0, 0xff, 0xff, 0, 0, 0, 3, b'v', b'=', b'x'];
        a.extend_from_slice(&1000i64.to_be_bytes());
        let mut r = Reader(&a);
        assert_eq!(r.i16().unwrap(), 0);
        assert_eq!(r.nullable_string().unwrap(), None);
        assert_eq!(r.bytes().unwrap(), b"v=x");
        assert_eq!(r.i64().unwrap(), 1000);
        // a length past the end is an error, not a panic
        let short = [0, 0, 0, 9, 1];
        assert!(Reader(&short).bytes().is_err());
        assert!(Reader(&[0xff, 0xff, 0xff, 0xff]).bytes().is_err());
    }

    #[test]
    fn host_of_strips_port_and_brackets() {
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("localhost:1"), "localhost");
    }
}
