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
    /// Authentications per second: N workers opening short connections that each do
    /// ApiVersions, SaslHandshake and a whole SASL exchange, then close.
    Auth(AuthArgs),
    /// A TCP relay that only moves bytes between its clients and an upstream server:
    /// the CPU floor of any process in the gateway's place.
    Relay(RelayArgs),
    /// Produce with pre-encoded Produce requests over N raw connections, several in
    /// flight on each: a producer that costs next to no CPU, so the broker sets the pace.
    Blast(BlastArgs),
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
    #[command(flatten)]
    pub security: Security,
}

/// How the client reaches and authenticates to the broker; the librdkafka properties of
/// the same names. Every client of a run (admin, metadata, producers, consumers) uses them.
#[derive(Debug, Args, Clone)]
pub struct Security {
    /// librdkafka `security.protocol`.
    #[arg(long, value_enum, default_value = "plaintext")]
    pub security_protocol: SecurityProtocol,
    /// librdkafka `sasl.mechanisms`; required with the SASL protocols.
    #[arg(long, value_enum)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// librdkafka `sasl.username`.
    #[arg(long, env = "KAFKA_BENCH_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    /// librdkafka `sasl.password`; prefer the environment variable, which stays out of
    /// the process list.
    #[arg(long, env = "KAFKA_BENCH_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<String>,
    /// librdkafka `ssl.ca.location`: PEM file of the CA that signed the broker's
    /// certificate (without it the system's roots are used).
    #[arg(long)]
    pub ssl_ca_location: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SecurityProtocol {
    #[value(name = "plaintext", alias = "PLAINTEXT")]
    Plaintext,
    #[value(name = "ssl", alias = "SSL")]
    Ssl,
    #[value(name = "sasl_plaintext", alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[value(name = "sasl_ssl", alias = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    pub fn as_config(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "PLAIN", alias = "plain")]
    Plain,
    #[value(name = "SCRAM-SHA-256", alias = "scram-sha-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512", alias = "scram-sha-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl Security {
    /// Checks that the options fit together: SASL protocols need a mechanism, a username
    /// and a password; the others take none of them.
    pub fn check(&self) -> Result<(), String> {
        let p = self.security_protocol;
        if p.uses_sasl() {
            if self.sasl_mechanism.is_none() {
                return Err(format!(
                    "--security-protocol {} needs --sasl-mechanism",
                    p.as_config()
                ));
            }
            if self.sasl_username.is_none() || self.sasl_password.is_none() {
                return Err(format!(
                    "--security-protocol {} needs --sasl-username and --sasl-password \
                     (or KAFKA_BENCH_SASL_USERNAME / KAFKA_BENCH_SASL_PASSWORD)",
                    p.as_config()
                ));
            }
        } else if self.sasl_mechanism.is_some() {
            return Err(format!(
                "--sasl-mechanism needs a SASL --security-protocol, not {}",
                p.as_config()
            ));
        }
        if self.ssl_ca_location.is_some() && !p.uses_tls() {
            return Err(format!(
                "--ssl-ca-location needs an SSL --security-protocol, not {}",
                p.as_config()
            ));
        }
        Ok(())
    }

    /// A one-line description for reports (no secrets).
    pub fn describe(&self) -> String {
        let mut s = self.security_protocol.as_config().to_ascii_uppercase();
        if let Some(m) = self.sasl_mechanism {
            s.push_str(&format!(" {}", m.name()));
        }
        if let Some(u) = &self.sasl_username {
            s.push_str(&format!(" as {u}"));
        }
        s
    }

    /// The librdkafka properties these options stand for, secrets included.
    pub fn rdkafka_properties(&self) -> Vec<(&'static str, String)> {
        let mut props = vec![(
            "security.protocol",
            self.security_protocol.as_config().to_string(),
        )];
        if let Some(m) = self.sasl_mechanism {
            props.push(("sasl.mechanisms", m.name().to_string()));
        }
        if let Some(u) = &self.sasl_username {
            props.push(("sasl.username", u.clone()));
        }
        if let Some(p) = &self.sasl_password {
            props.push(("sasl.password", p.clone()));
        }
        if let Some(ca) = &self.ssl_ca_location {
            props.push(("ssl.ca.location", ca.display().to_string()));
        }
        props
    }
}

#[cfg(feature = "librdkafka")]
impl Common {
    /// A librdkafka configuration with the broker address and the security options; every
    /// client of a run starts from it.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in self.security.rdkafka_properties() {
            config.set(k, v);
        }
        config
    }
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
    /// Idempotent producers (`enable.idempotence=true`): the baseline a transactional run
    /// is compared with.
    #[arg(long)]
    pub idempotent: bool,
    /// Transactional producers: each gets its own `transactional.id`, and commits a
    /// transaction every `--txn-records` records (and at the end).
    #[arg(long)]
    pub transactional: bool,
    /// Records per transaction, per producer, with `--transactional`.
    #[arg(long, default_value_t = 1000)]
    pub txn_records: u64,
}

#[derive(Debug, Args, Clone)]
pub struct BlastArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long)]
    pub topic: String,
    /// Partitions of the topic when it has to be created; each connection's requests go
    /// round-robin over the partitions the topic actually has, starting at its own index.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Connections, each a producer of its own (the broker sees N clients).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Value size in bytes (records carry no key and no headers).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Bytes of one request's record batch, about: as many records as fit (at least one).
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: usize,
    /// Seconds to send for.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Produce requests in flight (sent, not yet answered) per connection; librdkafka's
    /// `max.in.flight.requests.per.connection` defaults to 5.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    #[arg(long, value_enum, default_value = "all")]
    pub acks: Acks,
    /// Each connection an idempotent producer: it gets a producer id (InitProducerId)
    /// and each request's batch carries it with the next sequence (the batch's CRC
    /// computed again for each request).
    #[arg(long)]
    pub idempotent: bool,
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
    /// librdkafka `isolation.level`: `read_committed` (its default) stops at the last
    /// stable offset and drops aborted records; `read_uncommitted` reads to the high
    /// watermark.
    #[arg(long, value_enum, default_value = "read-committed")]
    pub isolation: Isolation,
}

/// A consumer's isolation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

impl Isolation {
    /// The librdkafka property value.
    pub fn as_config(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
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

#[derive(Debug, Args, Clone)]
pub struct RelayArgs {
    /// Address to accept connections on, HOST:PORT (`:0` picks a free port; the chosen
    /// address is printed to stderr).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Server every accepted connection is relayed to, HOST:PORT.
    #[arg(long)]
    pub upstream: String,
    /// Seconds to relay before stopping (default: until SIGINT/SIGTERM or `--timeout`).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Hard limit on the whole run in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Bytes read from a socket at a time, per direction of a connection.
    #[arg(long, default_value_t = 256 * 1024)]
    pub buffer: usize,
    /// Connections relayed at once; more are closed at once and counted as refused.
    #[arg(long, default_value_t = 64)]
    pub max_connections: usize,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct AuthArgs {
    /// Broker address, HOST:PORT.
    #[arg(long)]
    pub bootstrap: String,
    #[command(flatten)]
    pub security: Security,
    /// Concurrent workers, each opening one connection after the other.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Name checked against the broker's certificate (default: the host of --bootstrap).
    #[arg(long)]
    pub tls_server_name: Option<String>,
    /// Let TLS connections resume earlier sessions (off by default: every connection then
    /// pays a full handshake, as a freshly started client does).
    #[arg(long)]
    pub tls_resume: bool,
    /// Run PBKDF2 for every SCRAM login instead of once per salt and iteration count. The
    /// server does not run it per login, so without caching the client's own PBKDF2 is
    /// most of what a run measures on a shared machine.
    #[arg(long)]
    pub no_salt_cache: bool,
    /// Broker process to sample.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn auth(extra: &[&str]) -> AuthArgs {
        let mut argv = vec!["kafka-bench", "auth", "--bootstrap", "127.0.0.1:9093"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Auth(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn sasl_protocols_need_mechanism_and_credentials() {
        let a = auth(&["--security-protocol", "SASL_SSL"]);
        assert!(a.security.check().unwrap_err().contains("--sasl-mechanism"));
        let a = auth(&[
            "--security-protocol",
            "sasl_plaintext",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "u",
        ]);
        // the password may come from the environment of whoever runs the tests
        if std::env::var_os("KAFKA_BENCH_SASL_PASSWORD").is_none() {
            assert!(a.security.check().unwrap_err().contains("--sasl-password"));
        }
        let a = auth(&[
            "--security-protocol",
            "sasl_ssl",
            "--sasl-mechanism",
            "scram-sha-256",
            "--sasl-username",
            "u",
            "--sasl-password",
            "p",
            "--ssl-ca-location",
            "/ca.pem",
        ]);
        a.security.check().unwrap();
        assert_eq!(a.security.describe(), "SASL_SSL SCRAM-SHA-256 as u");
        let props = a.security.rdkafka_properties();
        assert!(props.contains(&("security.protocol", "sasl_ssl".into())));
        assert!(props.contains(&("sasl.mechanisms", "SCRAM-SHA-256".into())));
        assert!(props.contains(&("sasl.password", "p".into())));
        assert!(props.contains(&("ssl.ca.location", "/ca.pem".into())));
    }

    #[test]
    fn options_that_do_not_fit_the_protocol_are_refused() {
        let a = auth(&["--sasl-mechanism", "PLAIN"]);
        assert!(a.security.check().is_err());
        let a = auth(&["--ssl-ca-location", "/ca.pem"]);
        assert!(a.security.check().is_err());
        let a = auth(&[]);
        a.security.check().unwrap();
        assert_eq!(
            a.security.rdkafka_properties(),
            vec![("security.protocol", "plaintext".to_string())]
        );
    }
}
