//! The standard `process_*` metrics (CPU time, resident memory, open file descriptors,
//! start time), read from `/proc/self` at scrape time. On systems without `/proc` they
//! are simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

/// What `/proc/self/stat` says, in seconds and bytes.
#[derive(Debug, PartialEq)]
pub(crate) struct ProcStat {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: u64,
    pub(crate) virtual_bytes: u64,
    pub(crate) start_seconds_since_boot: f64,
}

/// Kernel clock ticks per second; 100 on every Linux architecture this runs on.
const TICKS: f64 = 100.0;
const PAGE: u64 = 4096;

/// Parses the line of `/proc/self/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its closing parenthesis.
pub(crate) fn parse_stat(line: &str) -> Option<ProcStat> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so field N is f[N - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let utime = num(14)?;
    let stime = num(15)?;
    Some(ProcStat {
        cpu_seconds: (utime + stime) as f64 / TICKS,
        start_seconds_since_boot: num(22)? as f64 / TICKS,
        virtual_bytes: num(23)?,
        resident_bytes: num(24)?.saturating_mul(PAGE),
    })
}

fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(stat) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|l| parse_stat(&l))
        else {
            return Ok(());
        };
        ConstCounter::new(stat.cpu_seconds).encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            None,
            MetricType::Counter,
        )?)?;
        ConstGauge::new(stat.resident_bytes as i64).encode(encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            None,
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(stat.virtual_bytes as i64).encode(encoder.encode_descriptor(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            None,
            MetricType::Gauge,
        )?)?;
        if let Some(fds) = open_fds() {
            ConstGauge::new(fds as i64).encode(encoder.encode_descriptor(
                "process_open_fds",
                "Open file descriptors",
                None,
                MetricType::Gauge,
            )?)?;
        }
        if let Some(boot) = boot_time() {
            ConstGauge::new(boot as f64 + stat.start_seconds_since_boot).encode(
                encoder.encode_descriptor(
                    "process_start_time_seconds",
                    "Start time of the process since the Unix epoch, in seconds",
                    None,
                    MetricType::Gauge,
                )?,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_spaces_and_parentheses_in_the_name() {
        let line = "4242 (iggy (gw) x) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 8 0 12345 987654 300 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            s,
            ProcStat {
                cpu_seconds: 4.0,
                resident_bytes: 300 * 4096,
                virtual_bytes: 987_654,
                start_seconds_since_boot: 123.45,
            }
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn reads_this_process() {
        let line = std::fs::read_to_string("/proc/self/stat").unwrap();
        let s = parse_stat(&line).unwrap();
        assert!(s.resident_bytes > 0);
    }
}
