//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Load generator for Kafka-protocol brokers, through librdkafka.
#[derive(Debug, Parser)]
#[command(name = "kafka-bench", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Produce fixed-size records with N concurrent producers.
    Produce(ProduceArgs),
    /// Read a topic up to the high watermarks taken at start.
    Consume(ConsumeArgs),
    /// Hold N raw TCP connections, each after one ApiVersions v0 exchange.
    IdleConnections(IdleArgs),
    /// Native baseline: produce the same records with the Iggy SDK.
    #[cfg(feature = "iggy-native")]
    IggyProduce(crate::iggy_native::IggyProduceArgs),
    /// Native baseline: read an Iggy topic to its end with the Iggy SDK.
    #[cfg(feature = "iggy-native")]
    IggyConsume(crate::iggy_native::IggyConsumeArgs),
}

/// Options every Kafka subcommand shares.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Broker address, HOST:PORT. The only address this tool connects to (plus whatever
    /// that broker advertises in Metadata, as any Kafka client does).
    #[arg(long)]
    pub bootstrap: String,
    /// Process to sample in /proc (RSS, peak RSS, CPU seconds) at start, every second and
    /// at the end: the broker under test.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Hard limit on the whole run in seconds, whatever else is asked.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Extra librdkafka property for the producers or consumers, KEY=VALUE; repeatable.
    /// Applied last, so it overrides the tool's own settings.
    #[arg(short = 'X', long = "rdkafka", value_parser = parse_kv)]
    pub rdkafka: Vec<(String, String)>,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Acks {
    All,
    #[value(name = "1")]
    One,
    #[value(name = "0")]
    Zero,
}

impl Acks {
    pub fn as_config(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::One => "1",
            Acks::Zero => "0",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn as_config(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

#[derive(Debug, Args, Clone)]
#[command(group(clap::ArgGroup::new("amount").required(true).args(["records", "duration"])))]
pub struct ProduceArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long)]
    pub topic: String,
    /// Partitions of the topic when it has to be created; records go round-robin over the
    /// partitions the topic actually has.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Concurrent producer instances (each its own librdkafka client and connections).
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Value size in bytes (records carry no key and no headers).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Records in total, split evenly over the producers.
    #[arg(long)]
    pub records: Option<u64>,
    /// Produce for this many seconds instead of a fixed count.
    #[arg(long)]
    pub duration: Option<u64>,
    #[arg(long, value_enum, default_value = "all")]
    pub acks: Acks,
    #[arg(long, value_enum, default_value = "none")]
    pub codec: Codec,
    /// librdkafka `linger.ms`.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// librdkafka `batch.size` in bytes.
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: u64,
    /// Total target rate in records per second over all producers (default: as fast as
    /// the broker acknowledges).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Records in flight (sent, not yet acknowledged) per producer.
    #[arg(long, default_value_t = 20_000)]
    pub max_in_flight: usize,
}

#[derive(Debug, Args, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long)]
    pub topic: String,
    /// Concurrent consumer instances.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Consume as members of this consumer group (subscribe); without it the partitions
    /// are assigned round-robin to the consumers directly (assign, no group protocol).
    #[arg(long)]
    pub group: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct IdleArgs {
    /// Broker address, HOST:PORT.
    #[arg(long)]
    pub bootstrap: String,
    /// Connections to open (this process needs as many file descriptors).
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    /// Seconds to hold them open after the last one is established.
    #[arg(long, default_value_t = 10)]
    pub hold: u64,
    /// Broker process to sample.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
