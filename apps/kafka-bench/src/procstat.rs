//! Memory and CPU counters of another process, from `/proc/PID/status` and `/proc/PID/stat`.

use std::fs;

use serde::Serialize;

/// Kernel clock ticks per second for `utime`/`stime`. `USER_HZ` is 100 on every Linux
/// architecture this runs on; reading `sysconf(_SC_CLK_TCK)` would need `unsafe` FFI,
/// which the workspace forbids.
const CLK_TCK: f64 = 100.0;

/// One reading of a process's counters.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// Peak resident set size since the process started (`VmHWM`), KiB.
    pub hwm_kib: u64,
    /// User + system CPU time since the process started, seconds.
    pub cpu_secs: f64,
}

/// Reads the counters of `pid`; `None` when the process is gone or /proc is unreadable.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let rss_kib = field("VmRSS:")?;
    let hwm_kib = field("VmHWM:")?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: count fields
    // from the last ')'. utime and stime are fields 14 and 15 of the whole line, so 12 and
    // 13 after it (0-based), the state field being 0.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Sample {
        rss_kib,
        hwm_kib,
        cpu_secs: (utime + stime) as f64 / CLK_TCK,
    })
}

/// The counters of one process over a run: first and last readings and the largest RSS
/// seen by the periodic samples in between.
#[derive(Debug, Clone, Serialize)]
pub struct ProcReport {
    pub pid: u32,
    pub start: Option<Sample>,
    pub end: Option<Sample>,
    /// Largest `VmRSS` among the samples taken during the run, KiB.
    pub peak_rss_kib_during_run: u64,
    /// CPU seconds the process used between the first and the last reading.
    pub cpu_secs_used: Option<f64>,
}

/// Collects samples of one process during a run.
#[derive(Debug, Clone)]
pub struct Tracker {
    pid: u32,
    start: Option<Sample>,
    peak_rss_kib: u64,
}

impl Tracker {
    pub fn start(pid: u32) -> Self {
        let start = sample(pid);
        if start.is_none() {
            eprintln!("kafka-bench: warning: cannot read /proc/{pid}: no broker counters");
        }
        Tracker {
            pid,
            start,
            peak_rss_kib: start.map_or(0, |s| s.rss_kib),
        }
    }

    /// Takes an intermediate sample; returns it for progress output.
    pub fn tick(&mut self) -> Option<Sample> {
        let s = sample(self.pid)?;
        self.peak_rss_kib = self.peak_rss_kib.max(s.rss_kib);
        Some(s)
    }

    pub fn finish(mut self) -> ProcReport {
        let end = self.tick();
        let cpu_secs_used = match (self.start, end) {
            (Some(a), Some(b)) => Some(b.cpu_secs - a.cpu_secs),
            _ => None,
        };
        ProcReport {
            pid: self.pid,
            start: self.start,
            end,
            peak_rss_kib_during_run: self.peak_rss_kib,
            cpu_secs_used,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).expect("own /proc entry");
        assert!(s.rss_kib > 0);
        assert!(s.hwm_kib >= s.rss_kib);
        assert!(s.cpu_secs >= 0.0);
    }
}
