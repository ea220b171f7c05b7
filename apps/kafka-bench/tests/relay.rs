//! `kafka-bench relay` between a client and an echo server on loopback: every byte
//! arrives unchanged and in order both ways, the counts it reports are the bytes moved,
//! connections over its cap are refused, and SIGTERM ends the run with its report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

/// An echo server: each connection gets back what it sent, until it closes its side.
fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                let mut back = stream.try_clone().unwrap();
                let _ = std::io::copy(&mut stream, &mut back);
                let _ = back.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// Starts the relay and returns it with the address it listens on.
fn start_relay(upstream: &str, json: &std::path::Path, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kafka-bench"))
        .args(["relay", "--upstream", upstream, "--timeout", "60", "--json"])
        .arg(json)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("kafka-bench relay: listening on ")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    // Keep draining stderr so the relay never blocks on a full pipe.
    thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
    });
    (child, addr)
}

/// SIGTERM ends the run; the relay then prints its report (and writes the JSON).
fn stop(child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.stdout.starts_with(b"relay"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Sends `data` through `addr` and reads the echo back; the write and the read run at
/// once, so neither direction's socket buffers fill up and stall the other.
fn round_trip(addr: &str, data: Vec<u8>) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = thread::spawn(move || {
        writer.write_all(&data).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    stream.read_to_end(&mut back).unwrap();
    sender.join().unwrap();
    back
}

#[test]
fn relays_every_byte_both_ways_and_counts_them() {
    let upstream = echo_server();
    let dir = std::env::temp_dir().join(format!("kafka-bench-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("relay.json");
    // A small buffer, so one connection's bytes cross in many reads and writes.
    let (child, addr) = start_relay(&upstream, &json, &["--buffer", "4096"]);
    let data: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let back = round_trip(&addr, data.clone());
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echo came back changed");
    let small = round_trip(&addr, b"second connection".to_vec());
    assert_eq!(small, b"second connection");
    stop(child);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let moved = (data.len() + 17) as u64;
    assert_eq!(report["bytes_up"], moved, "{report}");
    assert_eq!(report["bytes_down"], moved, "{report}");
    assert_eq!(report["connections"], 2, "{report}");
    assert_eq!(report["refused"], 0, "{report}");
    assert!(report["relay_cpu_secs"].as_f64().is_some(), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn connections_over_the_cap_are_refused() {
    let upstream = echo_server();
    let dir = std::env::temp_dir().join(format!("kafka-bench-relay-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("relay.json");
    let (child, addr) = start_relay(&upstream, &json, &["--max-connections", "1"]);
    // The first connection stays open (its echo half-done), so the second is over the cap.
    let mut held = TcpStream::connect(&addr).unwrap();
    held.write_all(b"held").unwrap();
    let mut four = [0u8; 4];
    held.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    held.read_exact(&mut four).unwrap();
    assert_eq!(&four, b"held");
    let mut over = TcpStream::connect(&addr).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    // Closed by the relay without a byte (a reset reads as an error: closed too).
    let n = over.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!(n, 0);
    drop(held);
    stop(child);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["connections"], 1, "{report}");
    assert_eq!(report["refused"], 1, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
