//! A real Iggy server for the integration tests: started from `IGGY_SERVER_BIN` on
//! loopback with free ports, a fresh data directory and known root credentials, stopped
//! and cleaned up on drop.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const USER: &str = "iggy";
pub const PASSWORD: &str = "bridge-test-secret";

/// The server binary, or `None` after printing the skip notice.
pub fn server_bin() -> Option<PathBuf> {
    match std::env::var_os("IGGY_SERVER_BIN") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => {
            println!("SKIPPED: IGGY_SERVER_BIN not set");
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One running iggy-server.
#[derive(Debug)]
pub struct Server {
    bin: PathBuf,
    pub dir: PathBuf,
    pub address: String,
    child: Option<Child>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Server {
    /// Starts a server and waits until it accepts connections.
    pub fn start(bin: PathBuf) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "iggy-bridge-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let address = format!("127.0.0.1:{}", free_port());
        let mut server = Server {
            bin,
            dir,
            address,
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("server log");
        let log2 = log.try_clone().expect("server log");
        let child = Command::new(&self.bin)
            .current_dir(&self.dir)
            .env("IGGY_SYSTEM_PATH", self.dir.join("data"))
            .env("IGGY_TCP_ADDRESS", &self.address)
            .env("IGGY_HTTP_ENABLED", "false")
            .env("IGGY_QUIC_ENABLED", "false")
            .env("IGGY_WEBSOCKET_ENABLED", "false")
            .env("IGGY_HTTP_ADDRESS", format!("127.0.0.1:{}", free_port()))
            .env("IGGY_QUIC_ADDRESS", format!("127.0.0.1:{}", free_port()))
            .env(
                "IGGY_WEBSOCKET_ADDRESS",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("IGGY_ROOT_USERNAME", USER)
            .env("IGGY_ROOT_PASSWORD", PASSWORD)
            .env("IGGY_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .expect("start iggy-server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("iggy-server exited with {status}; log: {}", self.log_tail());
            }
            if std::net::TcpStream::connect(&self.address).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "iggy-server did not listen on {} within 90 s; log: {}",
                self.address,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Kills the process (no clean shutdown), keeping the data directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process the way an operator does (SIGTERM, so Iggy flushes what it
    /// acknowledged), SIGKILL if it has not exited after 30 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the process and starts it again on the same address and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn config(&self) -> BridgeConfig {
        BridgeConfig {
            address: self.address.clone(),
            call_timeout: Duration::from_secs(20),
            sessions: 2,
            poll_interval: Duration::from_millis(20),
            ..BridgeConfig::new(USER, PASSWORD)
        }
    }

    pub async fn bridge(&self) -> IggyBridge {
        IggyBridge::connect(self.config())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", self.log_tail()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A name unique to this test run, for topics and groups.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}
