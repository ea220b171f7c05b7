//! `idle-connections`: what N open, idle client connections cost the broker.
//!
//! Opens `--count` plain TCP connections one after another; on each it sends one
//! ApiVersions v0 request (built by hand: the request is 4 fixed fields) and reads the
//! whole answer, so every connection has been through the broker's accept and request
//! path. Then it holds them for `--hold` seconds, sampling the broker once a second, and
//! checks at the end that each one still answers a second ApiVersions. Broker RSS is
//! reported before the first connection, with all of them held (the largest sample) and
//! one second after they are closed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::IdleArgs;
use crate::procstat::{Sample, sample};
use crate::report::Report;

const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest ApiVersions answer accepted; real ones are well under 2 KiB.
const MAX_ANSWER: usize = 1 << 20;

/// An ApiVersions v0 request frame: size, api key 18, version 0, correlation id, client id.
fn api_versions_v0(correlation_id: i32) -> Vec<u8> {
    let client_id = b"kafka-bench";
    let mut body = Vec::with_capacity(10 + client_id.len());
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Sends one ApiVersions v0 and checks the answer's correlation id and error code.
fn exchange(stream: &mut TcpStream, correlation_id: i32) -> Result<(), String> {
    stream
        .write_all(&api_versions_v0(correlation_id))
        .map_err(|e| format!("send: {e}"))?;
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .map_err(|e| format!("read size: {e}"))?;
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| (6..=MAX_ANSWER).contains(&s))
        .ok_or_else(|| format!("answer size {size}"))?;
    let mut body = vec![0u8; size];
    stream
        .read_exact(&mut body)
        .map_err(|e| format!("read answer: {e}"))?;
    let got = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let error = i16::from_be_bytes([body[4], body[5]]);
    if got != correlation_id {
        return Err(format!("correlation id {got}, expected {correlation_id}"));
    }
    if error != 0 {
        return Err(format!("ApiVersions error code {error}"));
    }
    Ok(())
}

pub async fn run(args: IdleArgs) -> Result<Report, String> {
    tokio::task::spawn_blocking(move || run_blocking(&args))
        .await
        .map_err(|e| format!("idle task: {e}"))?
}

fn run_blocking(args: &IdleArgs) -> Result<Report, String> {
    let addr = args
        .bootstrap
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", args.bootstrap))?
        .next()
        .ok_or_else(|| format!("{}: no address", args.bootstrap))?;
    let mib = |s: Option<Sample>| s.map(|s| s.rss_kib as f64 / 1024.0);
    let pid = args.gateway_pid;
    let before = pid.and_then(sample);

    let open_start = Instant::now();
    let mut conns = Vec::with_capacity(args.count);
    let mut first_error = None;
    for i in 0..args.count {
        let opened = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .map_err(|e| format!("connect: {e}"))
            .and_then(|mut s| {
                s.set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| s.set_write_timeout(Some(IO_TIMEOUT)))
                    .and_then(|()| s.set_nodelay(true))
                    .map_err(|e| format!("socket options: {e}"))?;
                exchange(&mut s, i as i32)?;
                Ok(s)
            });
        match opened {
            Ok(s) => conns.push(s),
            Err(e) => {
                // Stop at the first failure: it is usually a limit (file descriptors,
                // the broker's connection cap) and the rest would fail the same way.
                first_error = Some(format!("connection {i}: {e}"));
                break;
            }
        }
        if (i + 1) % 100 == 0 {
            eprintln!("[idle] {} connections open", i + 1);
        }
    }
    let open_secs = open_start.elapsed().as_secs_f64();
    let established = conns.len();

    let mut held_peak: Option<Sample> = None;
    let hold_end = Instant::now() + Duration::from_secs(args.hold);
    loop {
        if let Some(s) = pid.and_then(sample) {
            if held_peak.is_none_or(|p| s.rss_kib > p.rss_kib) {
                held_peak = Some(s);
            }
            eprintln!(
                "[idle] holding {established} connections, broker rss {:.1} MiB",
                s.rss_kib as f64 / 1024.0
            );
        } else {
            eprintln!("[idle] holding {established} connections");
        }
        let now = Instant::now();
        if now >= hold_end {
            break;
        }
        std::thread::sleep((hold_end - now).min(Duration::from_secs(1)));
    }
    let mut alive = 0usize;
    for (i, s) in conns.iter_mut().enumerate() {
        if exchange(s, (args.count + i) as i32).is_ok() {
            alive += 1;
        }
    }
    for s in &conns {
        let _ = s.shutdown(Shutdown::Both);
    }
    drop(conns);
    // Give the broker a moment to notice the closes and free the connection state.
    std::thread::sleep(Duration::from_secs(1));
    let after = pid.and_then(sample);

    let per_conn_kib = match (before, held_peak) {
        (Some(b), Some(h)) if established > 0 => {
            Some((h.rss_kib as f64 - b.rss_kib as f64) / established as f64)
        }
        _ => None,
    };
    let fmt = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1} MiB"));
    let mut rows = vec![
        ("bootstrap".into(), args.bootstrap.clone()),
        (
            "connections".into(),
            format!(
                "{established} of {} established in {open_secs:.2} s",
                args.count
            ),
        ),
        (
            "still answering after hold".into(),
            format!("{alive} of {established}"),
        ),
        ("broker rss before".into(), fmt(mib(before))),
        ("broker rss while held (max)".into(), fmt(mib(held_peak))),
        ("broker rss after close".into(), fmt(mib(after))),
        (
            "per connection".into(),
            per_conn_kib.map_or_else(|| "n/a".into(), |k| format!("{k:.1} KiB")),
        ),
    ];
    if let Some(e) = &first_error {
        rows.push(("first error".into(), e.clone()));
    }
    let json = json!({
        "mode": "idle-connections",
        "bootstrap": args.bootstrap,
        "requested": args.count,
        "established": established,
        "alive_after_hold": alive,
        "hold_secs": args.hold,
        "open_secs": open_secs,
        "first_error": first_error,
        "broker_pid": pid,
        "before": before,
        "held": held_peak,
        "after": after,
        "rss_mib_before": mib(before),
        "rss_mib_held": mib(held_peak),
        "rss_mib_after": mib(after),
        "per_connection_kib": per_conn_kib,
    });
    Ok(Report {
        title: "kafka-bench idle-connections".into(),
        rows,
        json,
        json_path: args.json.clone(),
        success: established == args.count && alive == established,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn api_versions_frame_layout() {
        let f = api_versions_v0(7);
        assert_eq!(&f[..4], &((f.len() - 4) as i32).to_be_bytes());
        assert_eq!(&f[4..6], &18i16.to_be_bytes());
        assert_eq!(&f[6..8], &0i16.to_be_bytes());
        assert_eq!(&f[8..12], &7i32.to_be_bytes());
        assert_eq!(&f[12..14], &11i16.to_be_bytes());
        assert_eq!(&f[14..], b"kafka-bench");
    }
}
