//! Shared counters, the once-a-second progress line, latency summaries and the final
//! report (table on stdout, JSON file).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::procstat::{ProcReport, Tracker, sample};

/// Counters the workers bump and the progress line reads.
#[derive(Debug, Default)]
pub struct Counters {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    pub fn add(&self, records: u64, bytes: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the progress task measured over a run besides the records.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The broker's counters, when its pid was given.
    pub broker: Option<ProcReport>,
    /// CPU seconds this process used (the client library's threads included), so a
    /// report shows how much of the machine the load itself took.
    pub client_cpu_secs: Option<f64>,
}

/// Prints a progress line to stderr once a second and samples the broker process, until
/// `stop` is set. Returns the broker's counters and this process's CPU time over the
/// whole run.
pub fn spawn_progress(
    label: &'static str,
    counters: Arc<Counters>,
    pid: Option<u32>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Measured> {
    tokio::spawn(async move {
        let own = std::process::id();
        let client_start = sample(own).map(|s| s.cpu_secs);
        let mut tracker = pid.map(Tracker::start);
        let start = Instant::now();
        let mut last = (0u64, 0u64);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let records = counters.records.load(Ordering::Relaxed);
            let bytes = counters.bytes.load(Ordering::Relaxed);
            let errors = counters.errors.load(Ordering::Relaxed);
            let mut line = format!(
                "[{label} {:>5.1}s] {records} records ({}/s), {:.2} MB/s, {errors} errors",
                start.elapsed().as_secs_f64(),
                records - last.0,
                (bytes - last.1) as f64 / 1e6,
            );
            if let Some(s) = tracker.as_mut().and_then(Tracker::tick) {
                let _ = write!(
                    line,
                    ", broker rss {:.1} MiB cpu {:.1}s",
                    s.rss_kib as f64 / 1024.0,
                    s.cpu_secs
                );
            }
            eprintln!("{line}");
            last = (records, bytes);
        }
        let client_end = sample(own).map(|s| s.cpu_secs);
        Measured {
            broker: tracker.map(Tracker::finish),
            client_cpu_secs: client_start.zip(client_end).map(|(a, b)| b - a),
        }
    })
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
}

impl Latency {
    /// A table row `WHAT p50/p99/p999/max` with the four in milliseconds.
    pub fn row(&self, what: &str) -> (String, String) {
        let ms = |us: u64| us as f64 / 1e3;
        (
            format!("{what} p50/p99/p999/max"),
            format!(
                "{:.2} / {:.2} / {:.2} / {:.2} ms",
                ms(self.p50_us),
                ms(self.p99_us),
                ms(self.p999_us),
                ms(self.max_us)
            ),
        )
    }
}

/// A histogram for latencies from 1 µs to 10 minutes at 3 significant digits.
pub fn latency_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 600_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

/// What a subcommand hands back to `main`: a table, a JSON value and whether the run met
/// its own correctness conditions (no errors, everything read).
#[derive(Debug)]
pub struct Report {
    pub title: String,
    pub rows: Vec<(String, String)>,
    pub json: serde_json::Value,
    pub json_path: Option<PathBuf>,
    pub success: bool,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.success
    }

    /// Prints the table to stdout and writes the JSON file, if one was asked for.
    pub fn emit(&self) -> Result<(), String> {
        let width = self.rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        println!("{}", self.title);
        for (k, v) in &self.rows {
            println!("  {k:<width$}  {v}");
        }
        if let Some(path) = &self.json_path {
            let text = serde_json::to_string_pretty(&self.json)
                .map_err(|e| format!("encoding the JSON result: {e}"))?;
            std::fs::write(path, text + "\n")
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// Table rows for the client's CPU time and the broker process report.
pub fn proc_rows(rows: &mut Vec<(String, String)>, m: &Measured) {
    if let Some(c) = m.client_cpu_secs {
        rows.push(("client cpu used".into(), format!("{c:.2} s")));
    }
    let Some(p) = &m.broker else { return };
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    if let Some(s) = p.start {
        rows.push(("broker rss at start".into(), mib(s.rss_kib)));
    }
    rows.push((
        "broker peak rss (run)".into(),
        mib(p.peak_rss_kib_during_run),
    ));
    if let Some(s) = p.end {
        rows.push(("broker rss at end".into(), mib(s.rss_kib)));
        rows.push(("broker VmHWM at end".into(), mib(s.hwm_kib)));
    }
    if let Some(c) = p.cpu_secs_used {
        rows.push(("broker cpu used".into(), format!("{c:.2} s")));
    }
}

/// Records/s and MB/s (10^6 bytes) over `elapsed`.
pub fn rates(records: u64, bytes: u64, elapsed: Duration) -> (f64, f64) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    (records as f64 / secs, bytes as f64 / secs / 1e6)
}

/// The librdkafka actually loaded (the dynamic library can be swapped with
/// `LD_LIBRARY_PATH`, so the version compiled against says little).
#[cfg(feature = "librdkafka")]
pub fn client_version() -> String {
    let (_, version) = rdkafka::util::get_rdkafka_version();
    format!("librdkafka {version}")
}
