//! `iggy-gateway-kafka`: serves the Kafka wire protocol so any Kafka client can use Apache
//! Iggy as its broker. This binary only reads the configuration, binds the port, picks the
//! storage backend and hands over to [`kafka_broker::run`].
//!
//! # The listen line (a stable interface)
//!
//! Once the port is bound and the gateway is about to serve, it writes exactly one line to
//! **standard output** (logs go to standard error, so stdout carries nothing else):
//!
//! ```text
//! listening on <BOUND_ADDR> advertised <ADVERTISED_HOST>:<ADVERTISED_PORT>
//! ```
//!
//! - `<BOUND_ADDR>` is the socket address actually bound, as Rust prints a `SocketAddr`:
//!   `127.0.0.1:40123`, or `[::1]:40123` for IPv6. With `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`
//!   it carries the port the system picked.
//! - The advertised part is what Metadata tells clients; an IPv6 literal host is written
//!   in brackets (`[::1]:40123`).
//! - Both fields contain no spaces. A test finds the port with
//!   `^listening on (\S+) advertised (\S+)$` on the first stdout line.
//!
//! The line is written after the signal handlers are installed, so a SIGTERM sent as soon
//! as it is read already shuts down gracefully. It does not depend on `RUST_LOG`.
//!
//! # Exit codes
//!
//! - `0`: stopped gracefully after SIGINT or SIGTERM (or `--help`, `--version`);
//! - `1`: a failure after start-up began (port in use, broker error);
//! - `2`: invalid command line or configuration, reported as one line on stderr;
//! - `130`: a second signal cut the graceful shutdown short.

mod config;
mod shutdown;

use clap::Parser;
use config::{Backend, GatewayConfig, LogFormat};
use iggy_kafka_bridge::IggyBridge;
use kafka_broker::metrics::Metrics;
use kafka_broker::store::memory::MemoryStore;
use kafka_broker::{Server, Stores};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// A Kafka-protocol gateway for Apache Iggy: point any Kafka client at it.
///
/// Settings come from built-in defaults, then the optional TOML file, then IGGY_KAFKA_*
/// environment variables (each layer overrides the previous one). Every setting is
/// described in docs/configuration.md. Log verbosity follows RUST_LOG (default: info),
/// the log format IGGY_KAFKA_LOG_FORMAT (text or json).
#[derive(Debug, Parser)]
#[command(name = "iggy-gateway-kafka", version, about, long_about)]
struct Cli {
    /// TOML configuration file (keys as in docs/configuration.md, in lower case without
    /// the IGGY_KAFKA_ prefix); IGGY_KAFKA_CONFIG names it too. Environment variables
    /// override its values.
    // Read by hand rather than with clap's `env`: clap rejects an empty variable, and an
    // empty IGGY_KAFKA_CONFIG= (common in templated deployments) must mean "no file".
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Failures after the configuration was accepted.
#[derive(Debug, thiserror::Error)]
enum Fatal {
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot bind IGGY_KAFKA_BIND_ADDR={addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot bind IGGY_KAFKA_METRICS_ADDR={addr}: {source}")]
    BindMetrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the bound address: {0}")]
    LocalAddr(std::io::Error),
    #[error("broker: {0}")]
    Broker(#[from] kafka_broker::BrokerError),
    #[error("cannot start the Iggy bridge (IGGY_KAFKA_IGGY_ADDR={addr}): {source}")]
    Bridge {
        addr: String,
        source: iggy_kafka_bridge::BridgeError,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();

    let env = config::settings_from_env(std::env::vars_os().map(|(name, value)| {
        (
            name.to_string_lossy().into_owned(),
            value.to_string_lossy().into_owned(),
        )
    }));
    let file = cli.config.or_else(|| {
        std::env::var_os(config::CONFIG_FILE_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let config = match config::load(file.as_deref(), env) {
        Ok(config) => config,
        Err(e) => {
            // Plain stderr rather than a log event: this must be seen whatever RUST_LOG says.
            eprintln!("iggy-gateway-kafka: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(config.log_format);

    match run(config) {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("iggy-gateway-kafka: {e}");
            ExitCode::from(1)
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). Text has colours only on a
/// terminal so captured logs stay plain; JSON is one object per line with the message and
/// the event's fields at the top level.
fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.with_ansi(false).json().flatten_event(true).init(),
    }
}

fn run(config: GatewayConfig) -> Result<(), Fatal> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("gateway")
        .build()
        .map_err(Fatal::Runtime)?;
    let result = runtime.block_on(serve(config));
    // Connections were drained (or abandoned) by the broker already; anything still
    // running now is not worth delaying the exit for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(config: GatewayConfig) -> Result<(), Fatal> {
    let shutdown = shutdown::install().map_err(Fatal::Signals)?;

    let listener = TcpListener::bind(config.bind_addr)
        .await
        .map_err(|source| Fatal::Bind {
            addr: config.bind_addr,
            source,
        })?;
    let bound = listener.local_addr().map_err(Fatal::LocalAddr)?;
    let broker = config.broker_config(bound.port());

    if let Some(path) = &config.config_file {
        info!(file = %path.display(), "configuration file read");
    }
    for warning in &config.warnings {
        warn!("{warning}");
    }
    // The observability endpoint is bound before anything else starts, so a taken port
    // fails the start-up like the Kafka port does.
    let http = match config.metrics_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| Fatal::BindMetrics { addr, source })?,
        ),
        None => None,
    };
    let mut metrics = http.as_ref().map(|_| Metrics::new());

    // The retention task lives as long as this guard, i.e. until the broker has stopped.
    let (stores, _retention) = match config.backend {
        Backend::Memory(memory) => {
            warn!(
                max_total_bytes = memory.max_total_bytes,
                max_topics = memory.max_topics,
                "embedded in-memory store: data is kept in memory only and is lost when the \
                 gateway exits (topics, records and committed offsets)"
            );
            let store = Arc::new(MemoryStore::new(memory));
            let retention = store.start_retention();
            let stores = Stores {
                log: store.clone(),
                offsets: store,
            };
            (stores, Some(retention))
        }
        Backend::Iggy(bridge) => {
            let addr = bridge.address.clone();
            let stream = bridge.stream.clone();
            // A failed connection is fatal: never a silent downgrade to the memory store.
            let bridge = IggyBridge::connect(*bridge)
                .await
                .map_err(|source| Fatal::Bridge {
                    addr: addr.clone(),
                    source,
                })?;
            info!(iggy = %addr, stream = %stream, "storing records and committed offsets in Apache Iggy");
            if let Some(metrics) = metrics.as_mut() {
                bridge.register_metrics(metrics.registry_mut());
            }
            let bridge = Arc::new(bridge);
            let stores = Stores {
                log: bridge.clone(),
                offsets: bridge,
            };
            (stores, None)
        }
    };

    let advertised = host_port(&broker.advertised_host, broker.advertised_port);
    info!(
        bind = %bound,
        advertised = %advertised,
        node_id = broker.node_id,
        cluster_id = %broker.cluster_id,
        "gateway ready"
    );
    let mut server = Server::new(broker, stores);
    if let Some(http) = http {
        match http.local_addr() {
            Ok(addr) => info!(%addr, "serving /metrics, /health and /ready"),
            Err(e) => warn!(error = %e, "observability endpoint address unknown"),
        }
        server = server.http(http);
    }
    if let Some(metrics) = metrics {
        server = server.metrics(Arc::new(metrics));
    }
    announce(bound, &advertised);

    Ok(server.serve(listener, shutdown).await?)
}

/// Writes the listen line (format in the crate docs). A closed stdout is not a reason to
/// stop serving, so write errors are ignored.
fn announce(bound: SocketAddr, advertised: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening on {bound} advertised {advertised}");
    let _ = stdout.flush();
}

/// `host:port`, with an IPv6 literal in brackets so the port stays unambiguous.
fn host_port(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}
