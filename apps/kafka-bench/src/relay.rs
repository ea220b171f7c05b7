//! `relay`: a TCP relay that only moves bytes, the floor for any process in the gateway's
//! place.
//!
//! It accepts connections on `--listen`, opens one to `--upstream` for each, and copies
//! bytes both ways until either side closes, with nothing read or changed in between.
//! Put between the native Iggy SDK (`iggy-produce` / `iggy-consume`) and an Iggy server,
//! its CPU per GB is what moving the same bytes through one more process costs on this
//! machine: socket reads and writes, wakeups, scheduling. A gateway in that place also
//! parses, checks and maps the records, so its CPU per GB compared with the relay's, in
//! the same minutes, is what its own work costs. `apps/kafka-bench/relay-floor.sh` runs
//! the comparison.
//!
//! The relay stops after `--duration` seconds, on SIGINT or SIGTERM, or after `--timeout`
//! at the latest, and reports bytes each way, connections and its own CPU seconds
//! (`/proc/self`). Connections over `--max-connections` are refused (closed at once), so
//! the tool itself stays bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::cli::RelayArgs;
use crate::procstat::sample;
use crate::report::Report;

/// What the relay has moved so far.
#[derive(Debug, Default)]
struct Moved {
    /// Client to upstream.
    up: AtomicU64,
    /// Upstream to client.
    down: AtomicU64,
    /// Connections relayed (accepted and connected upstream).
    connections: AtomicU64,
    /// Connections refused: over the cap, or the upstream would not take them.
    refused: AtomicU64,
    /// Connections open now.
    open: AtomicUsize,
}

/// Copies `from` into `to` until `from` ends, counting bytes into `counter`; then shuts
/// `to`'s write side, so the other end sees the close.
async fn pump<R, W>(mut from: R, mut to: W, buffer: usize, counter: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; buffer];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}

/// Relays one accepted connection until both directions have ended.
async fn relay_one(client: TcpStream, upstream: String, buffer: usize, moved: Arc<Moved>) {
    let server = match TcpStream::connect(&upstream).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kafka-bench relay: cannot connect to {upstream}: {e}");
            moved.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    moved.connections.fetch_add(1, Ordering::Relaxed);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, buffer, &moved.up),
        pump(server_read, client_write, buffer, &moved.down),
    );
}

/// Waits for SIGINT or SIGTERM; never returns where neither can be watched.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run(args: RelayArgs) -> Result<Report, String> {
    if args.buffer == 0 {
        return Err("--buffer must be at least 1 byte".into());
    }
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("binding {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("reading the bound address: {e}"))?;
    // The script waits for this line to know the relay is up and where.
    eprintln!(
        "kafka-bench relay: listening on {local}, relaying to {}",
        args.upstream
    );
    let me = std::process::id();
    let cpu_at_start = sample(me).map(|s| s.cpu_secs);
    let started = Instant::now();
    let moved = Arc::new(Moved::default());
    let limit = Duration::from_secs(args.duration.unwrap_or(args.timeout).min(args.timeout));
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let stop = stop_signal();
    tokio::pin!(stop);
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            _ = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                moved.open.fetch_sub(1, Ordering::Relaxed);
            }
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if moved.open.load(Ordering::Relaxed) >= args.max_connections {
                    moved.refused.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                moved.open.fetch_add(1, Ordering::Relaxed);
                tasks.spawn(relay_one(client, args.upstream.clone(), args.buffer, moved.clone()));
            }
        }
    }
    let elapsed = started.elapsed();
    let cpu = match (cpu_at_start, sample(me).map(|s| s.cpu_secs)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    tasks.abort_all();
    let up = moved.up.load(Ordering::Relaxed);
    let down = moved.down.load(Ordering::Relaxed);
    let connections = moved.connections.load(Ordering::Relaxed);
    let refused = moved.refused.load(Ordering::Relaxed);
    let gb = (up + down) as f64 / 1e9;
    let per_gb = cpu.filter(|_| gb > 0.0).map(|c| c / gb);
    let mut rows = vec![
        ("listened on".to_string(), local.to_string()),
        ("upstream".to_string(), args.upstream.clone()),
        (
            "elapsed".to_string(),
            format!("{:.2} s", elapsed.as_secs_f64()),
        ),
        ("connections relayed".to_string(), connections.to_string()),
        ("connections refused".to_string(), refused.to_string()),
        ("bytes client -> upstream".to_string(), up.to_string()),
        ("bytes upstream -> client".to_string(), down.to_string()),
    ];
    if let Some(c) = cpu {
        rows.push(("relay cpu used".into(), format!("{c:.2} s")));
    }
    if let Some(p) = per_gb {
        rows.push(("relay cpu per GB moved".into(), format!("{p:.3} s")));
    }
    Ok(Report {
        title: "relay".into(),
        rows,
        json: json!({
            "mode": "relay",
            "listen": local.to_string(),
            "upstream": args.upstream,
            "elapsed_secs": elapsed.as_secs_f64(),
            "connections": connections,
            "refused": refused,
            "bytes_up": up,
            "bytes_down": down,
            "relay_cpu_secs": cpu,
            "relay_cpu_secs_per_gb_moved": per_gb,
        }),
        json_path: args.json,
        success: refused == 0,
    })
}
