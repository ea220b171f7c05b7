//! `iggy-gateway-kafka`: serves the Kafka wire protocol so any Kafka client can use Apache
//! Iggy as its broker. This binary only reads the configuration, binds the port, picks the
//! storage backend and hands over to [`kafka_broker::run`].
//!
//! # The listen lines (a stable interface)
//!
//! Once the ports are bound and the gateway is about to serve, it writes to **standard
//! output** (logs go to standard error, so stdout carries nothing else) one line for the
//! first listener, then one line per listener:
//!
//! ```text
//! listening on <BOUND_ADDR> advertised <ADVERTISED_HOST>:<ADVERTISED_PORT>
//! listener <NAME> <PROTOCOL> on <BOUND_ADDR> advertised <ADVERTISED_HOST>:<ADVERTISED_PORT>
//! ```
//!
//! - `<BOUND_ADDR>` is the socket address actually bound, as Rust prints a `SocketAddr`:
//!   `127.0.0.1:40123`, or `[::1]:40123` for IPv6. With `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0`
//!   it carries the port the system picked.
//! - The advertised part is what Metadata tells clients; an IPv6 literal host is written
//!   in brackets (`[::1]:40123`).
//! - Both fields contain no spaces. A test finds the port with
//!   `^listening on (\S+) advertised (\S+)$` on the first stdout line.
//! - `<NAME>` is the listener's name (`PLAINTEXT`, `SASL_SSL`, or a name from
//!   `IGGY_KAFKA_LISTENERS`) and `<PROTOCOL>` its security protocol.
//!
//! # Managing SASL users of the embedded store
//!
//! `iggy-gateway-kafka users set-password --file F USER` and `users set-scram --file F
//! [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N] USER` read the password as
//! one line from standard input and write the users file (`IGGY_KAFKA_SASL_USERS_FILE`);
//! `users delete --file F USER` removes a user. The file keeps salted hashes, never the
//! password. A running gateway reads the file again every 5 seconds.
//!
//! The line is written after the signal handlers are installed, so a SIGTERM sent as soon
//! as it is read already shuts down gracefully. It does not depend on `RUST_LOG`.
//!
//! # Exit codes
//!
//! - `0`: stopped gracefully after SIGINT or SIGTERM (or `--help`, `--version`);
//! - `1`: a failure after start-up began (port in use, broker error), or, with several
//!   gateways, this one lost its lease (a supervisor restarts it and it joins again);
//! - `2`: invalid command line or configuration, reported as one line on stderr;
//! - `130`: a second signal cut the graceful shutdown short.

mod config;
mod shutdown;

/// The process's allocator with the cargo feature `jemalloc` (on by default; not on MSVC
/// targets, where jemalloc does not build).
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::Parser;
use config::{Backend, GatewayConfig, LogFormat};
use iggy_kafka_bridge::IggyBridge;
use iggy_kafka_bridge::IggyPermissions;
use iggy_kafka_bridge::IggyPlainAuthenticator;
use iggy_kafka_bridge::{IggyMembership, JoinSettings};
use kafka_authz::store::{AclStore, MemoryAclStore};
use kafka_broker::metrics::Metrics;
use kafka_broker::session::Listener;
use kafka_broker::store::cluster::{MemberListener, Membership};
use kafka_broker::store::memory::MemoryStore;
use kafka_broker::tls::TlsAcceptor;
use kafka_broker::{BoundListener, Server, Stores};
use kafka_sasl::{
    Authenticator, Mechanism, OAuthValidator, PlainAuthenticator, ScramCredential,
    ScramCredentialStore, UsersFile,
};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{error, info, warn};
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
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Manage the SASL users of the embedded store (the IGGY_KAFKA_SASL_USERS_FILE file).
    #[command(subcommand)]
    Users(UsersCommand),
}

#[derive(Debug, clap::Subcommand)]
enum UsersCommand {
    /// Set USER's password for SASL/PLAIN; the password is read as one line from stdin.
    SetPassword {
        /// The users file (created if missing).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// The user name.
        user: String,
    },
    /// Set USER's SCRAM credential; the password is read as one line from stdin.
    SetScram {
        /// The users file (created if missing).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-256")]
        mechanism: String,
        /// PBKDF2 iterations (the gateway accepts 4096 to 16384 by default).
        #[arg(long, default_value_t = kafka_sasl::scram::DEFAULT_ITERATIONS)]
        iterations: u32,
        /// The user name.
        user: String,
    },
    /// Remove USER (password and SCRAM credentials).
    Delete {
        /// The users file.
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// The user name.
        user: String,
    },
}

/// Failures after the configuration was accepted.
#[derive(Debug, thiserror::Error)]
enum Fatal {
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot bind {what}: {source}")]
    Bind {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Tls(kafka_broker::BrokerError),
    #[error("SASL: {0}")]
    Sasl(kafka_sasl::SaslError),
    #[error("cannot bind IGGY_KAFKA_METRICS_ADDR={addr}: {source}")]
    BindMetrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the bound address: {0}")]
    LocalAddr(std::io::Error),
    #[error("broker: {0}")]
    Broker(#[from] kafka_broker::BrokerError),
    #[error("IGGY_KAFKA_ACL_FILE: {0}")]
    AclFile(String),
    #[error("cannot join the other gateways (IGGY_KAFKA_BROKERS): {0}")]
    Join(iggy_kafka_bridge::BridgeError),
    #[error(
        "this gateway lost its place among the other gateways ({0}); it stopped so that a \
         restart joins again with a new epoch"
    )]
    LeaseLost(&'static str),
    #[error("cannot start the Iggy bridge (IGGY_KAFKA_IGGY_ADDR={addr}): {source}")]
    Bridge {
        addr: String,
        source: iggy_kafka_bridge::BridgeError,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Users(command)) = cli.command {
        return users(command);
    }

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
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("gateway");
    if let Some(workers) = config.worker_threads {
        builder.worker_threads(workers);
    }
    let runtime = builder.build().map_err(Fatal::Runtime)?;
    let result = runtime.block_on(serve(config));
    // Connections were drained (or abandoned) by the broker already; anything still
    // running now is not worth delaying the exit for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(config: GatewayConfig) -> Result<(), Fatal> {
    let shutdown = shutdown::install().map_err(Fatal::Signals)?;

    let mut sockets = Vec::with_capacity(config.listeners.len());
    for spec in &config.listeners {
        let tcp = TcpListener::bind(spec.bind)
            .await
            .map_err(|source| Fatal::Bind {
                what: if config.kafka_style_listeners {
                    format!(
                        "listener {} at {} (IGGY_KAFKA_LISTENERS)",
                        spec.name, spec.bind
                    )
                } else {
                    format!("IGGY_KAFKA_BIND_ADDR={}", spec.bind)
                },
                source,
            })?;
        let bound = tcp.local_addr().map_err(Fatal::LocalAddr)?;
        sockets.push((spec.clone(), tcp, bound));
    }
    // The first listener is the broker's own address (clients of listeners without an
    // address of their own are told it).
    let bound = sockets[0].2;
    let broker = config.broker_config(bound.port());
    let tls = match &config.tls {
        Some(settings) => Some(TlsAcceptor::new(settings.clone()).map_err(Fatal::Tls)?),
        None => None,
    };

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
    if let (Some(metrics), Some(tls)) = (metrics.as_mut(), &tls) {
        tls.register_metrics(metrics.registry_mut());
    }

    // With the bridge, the principal's own Iggy permissions are a source of decisions
    // (used when authorization is on).
    let mut iggy_permissions: Option<Arc<IggyPermissions>> = None;

    // The retention task and the log cleaner live as long as their guards, i.e. until the
    // broker has stopped.
    let mut credentials = Credentials::default();
    let max_acl_bindings = config.acls.max_bindings;
    let acl_store: Arc<dyn AclStore>;
    let acl_source: String;
    let acl_in_iggy = matches!(config.backend, Backend::Iggy(_));
    // The bridge, when several gateways share its Iggy: they join through it once the
    // listeners' advertised ports are known.
    let mut joins_through: Option<Arc<IggyBridge>> = None;
    // The bridge whose compacted partitions this gateway cleans (those it leads).
    let mut compacting: Option<Arc<IggyBridge>> = None;
    let (stores, _retention, _cleaner) = match config.backend {
        Backend::Memory(memory) => {
            warn!(
                max_total_bytes = memory.max_total_bytes,
                max_topics = memory.max_topics,
                "embedded in-memory store: data is kept in memory only and is lost when the \
                 gateway exits (topics, records and committed offsets)"
            );
            if let Some(path) = config.sasl.as_ref().and_then(|s| s.users_file.as_ref()) {
                let users = Arc::new(UsersFile::load(path).map_err(Fatal::Sasl)?);
                info!(file = %path.display(), users = users.users().len(), "SASL users file read");
                credentials.plain = Some(users.clone());
                credentials.scram = Some(users.clone());
                credentials.users_file = Some(users);
            }
            let (store, source) =
                memory_acl_store(config.acls.file.as_deref(), max_acl_bindings).await?;
            acl_store = store;
            acl_source = source;
            let store = Arc::new(MemoryStore::new(memory));
            let retention = store.start_retention();
            let cleaner = store.start_cleaner();
            if let Some(metrics) = metrics.as_mut() {
                metrics.register_log_cleaner(&store);
            }
            let stores = Stores {
                log: store.clone(),
                offsets: store,
            };
            (stores, Some(retention), Some(cleaner))
        }
        Backend::Iggy(bridge) => {
            let addr = bridge.address.clone();
            let stream = bridge.stream.clone();
            let bridge_meta_stream = bridge.meta_stream.clone();
            let proven = bridge.meta_secret.is_some();
            if config.sasl.is_some() {
                // PLAIN logs into Iggy with the client's own username and password.
                let plain = IggyPlainAuthenticator::new(&bridge).map_err(Fatal::Sasl)?;
                if let Some(metrics) = metrics.as_mut() {
                    plain.register_metrics(metrics.registry_mut());
                }
                credentials.plain = Some(Arc::new(plain));
            }
            // A failed connection is fatal: never a silent downgrade to the memory store.
            let bridge = IggyBridge::connect(*bridge)
                .await
                .map_err(|source| Fatal::Bridge {
                    addr: addr.clone(),
                    source,
                })?;
            info!(iggy = %addr, stream = %stream, "storing records and committed offsets in Apache Iggy");
            warn_about_meta_writers(&bridge, &bridge_meta_stream, proven).await;
            if let Some(metrics) = metrics.as_mut() {
                bridge.register_metrics(metrics.registry_mut());
            }
            if config.sasl.is_some() {
                credentials.scram = Some(bridge.scram_store());
            }
            iggy_permissions = Some(bridge.permissions());
            acl_store = bridge.acl_store(max_acl_bindings);
            acl_source = format!("the Iggy meta stream {}", bridge_meta_stream);
            let bridge = Arc::new(bridge);
            if config.cluster.has_others(broker.node_id) {
                joins_through = Some(bridge.clone());
            }
            compacting = Some(bridge.clone());
            let stores = Stores {
                log: bridge.clone(),
                offsets: bridge,
            };
            (stores, None, None)
        }
    };

    let advertised = host_port(&broker.advertised_host, broker.advertised_port);
    info!(
        bind = %bound,
        advertised = %advertised,
        node_id = broker.node_id,
        cluster_id = %broker.cluster_id,
        worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "gateway ready"
    );
    let mut lines = Vec::with_capacity(sockets.len());
    let mut listeners = Vec::with_capacity(sockets.len());
    let mut advertised_listeners = Vec::with_capacity(sockets.len());
    for (spec, tcp, addr) in sockets {
        let port = spec.advertise.port.unwrap_or(addr.port());
        advertised_listeners.push(MemberListener {
            name: spec.name.clone(),
            host: spec.advertise.host.clone(),
            port,
        });
        let listener =
            Listener::new(&spec.name, spec.protocol).advertising(&spec.advertise.host, port);
        let advertised = host_port(&spec.advertise.host, port);
        info!(listener = %spec.name, protocol = %spec.protocol, bind = %addr, %advertised, "listener bound");
        lines.push(format!(
            "listener {} {} on {addr} advertised {advertised}",
            spec.name, spec.protocol
        ));
        let mut bound = BoundListener::new(tcp, listener);
        if spec.protocol.uses_tls()
            && let Some(tls) = &tls
        {
            bound = bound.with_tls(tls.clone());
        }
        listeners.push(bound);
    }
    let authorizing = kafka_broker::server::authorization_enabled(&broker, &listeners);
    announce_authorization(authorizing, &broker, &acl_source, acl_in_iggy);
    let node_id = broker.node_id;
    let mut server = Server::new(broker, stores).acl_store(acl_store);
    // Several gateways: partitions and groups are routed by the live view of the
    // leases in Iggy. Alone (no list, or only this gateway): the broker's default.
    let membership = match joins_through {
        Some(bridge) => {
            let settings = JoinSettings::new(
                node_id,
                advertised_listeners,
                config.cluster.brokers.iter().map(|b| b.node_id).collect(),
                config.cluster.heartbeat_interval,
                config.cluster.session_timeout,
            );
            let membership = bridge.join_cluster(settings).await.map_err(Fatal::Join)?;
            let view = membership.view();
            info!(
                node_id,
                live = view.members.len(),
                brokers = config.cluster.brokers.len(),
                session_timeout_ms = config.cluster.session_timeout.as_millis(),
                "joined the other gateways; routing by their live view"
            );
            server = server.membership(membership.clone());
            Some(membership)
        }
        None => None,
    };
    // The bridge's log cleaner: only a partition's leader compacts it.
    let _compaction = compacting.and_then(|bridge| {
        let leads: iggy_kafka_bridge::LeaderFn = match membership.clone() {
            Some(m) => Arc::new(move |topic: &str, partition: i32| {
                m.acts_as_owner()
                    && kafka_broker::cluster::leader(&m.view(), topic, partition) == Some(node_id)
            }),
            None => Arc::new(|_: &str, _: i32| true),
        };
        bridge.start_compaction(leads)
    });
    // Lives as long as the runtime, which ends right after the broker stops.
    if let Some(users) = credentials.users_file.take() {
        tokio::spawn(reload_users(users));
    }
    if let Some(sasl) = config.sasl {
        let mechanisms: Vec<&str> = sasl.config.mechanisms.iter().map(|m| m.name()).collect();
        info!(mechanisms = %mechanisms.join(","), "SASL authentication on");
        let oauth = sasl.oauth.map(|o| Arc::new(OAuthValidator::new(o)));
        server = server.authenticator(Arc::new(Authenticator::new(
            sasl.config,
            credentials.plain,
            credentials.scram,
            oauth,
        )));
    }
    if let Some(permissions) = iggy_permissions.filter(|_| authorizing) {
        info!(
            refresh_ms = permissions.refresh_interval().as_millis(),
            "Iggy permissions enforced: each principal User:<name> may do no more than Iggy \
             user <name> (read again from Iggy at this interval)"
        );
        server = server.authorizer(permissions);
    }
    if let Some(http) = http {
        match http.local_addr() {
            Ok(addr) => info!(%addr, "serving /metrics, /health and /ready"),
            Err(e) => warn!(error = %e, "observability endpoint address unknown"),
        }
        server = server.http(http);
        if let Some(token) = &config.metrics_token {
            server = server.metrics_token(token.clone());
        }
    }
    if let Some(metrics) = metrics {
        server = server.metrics(Arc::new(metrics));
    }
    announce(bound, &advertised, &lines);

    // A lease that lapsed (Iggy unreachable for a session timeout) or a newer start of
    // this node id ends this start: it stops as on a signal and exits with 1, so its
    // supervisor starts it again and it joins with a new epoch. (Taking the lease up
    // again in the same process could act on ownership the others gave away meanwhile.)
    let lost = lease_lost(membership.clone(), config.cluster.heartbeat_interval);
    let lost_reason: Arc<std::sync::Mutex<Option<&'static str>>> = Arc::default();
    let stop = {
        let lost_reason = lost_reason.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                reason = lost => {
                    error!(reason, "this gateway lost its lease among the other gateways; stopping");
                    if let Ok(mut r) = lost_reason.lock() {
                        *r = Some(reason);
                    }
                }
            }
        }
    };
    let served = server.serve_listeners(listeners, stop).await;
    // Leaving at once lets the others take this gateway's partitions and groups now
    // rather than after the session timeout.
    if let Some(membership) = membership
        && let Err(e) = membership.leave().await
    {
        warn!(error = %e, "could not record leaving the other gateways; they drop this one after the session timeout");
    }
    served?;
    match lost_reason.lock().ok().and_then(|r| *r) {
        Some(reason) => Err(Fatal::LeaseLost(reason)),
        None => Ok(()),
    }
}

/// Resolves once this gateway no longer holds its lease (never when it is alone), with
/// why.
async fn lease_lost(membership: Option<Arc<IggyMembership>>, every: Duration) -> &'static str {
    let Some(membership) = membership else {
        return std::future::pending().await;
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !membership.holds_lease() {
            return if membership.fenced() {
                "a newer start of this node id joined"
            } else {
                "no heartbeat reached Iggy within the session timeout"
            };
        }
    }
}

/// The embedded store's ACL bindings: from `file` when given, else none; at most `max`.
/// Also says where they came from, for the start-up line.
async fn memory_acl_store(
    file: Option<&std::path::Path>,
    max: usize,
) -> Result<(Arc<dyn AclStore>, String), Fatal> {
    let Some(path) = file else {
        return Ok((
            Arc::new(MemoryAclStore::new().with_max(max)),
            "memory (no ACL file; CreateAcls changes are lost at exit)".to_owned(),
        ));
    };
    let store = MemoryAclStore::load(path).map_err(|e| Fatal::AclFile(e.to_string()))?;
    let count = store
        .snapshot()
        .await
        .map_err(|e| Fatal::AclFile(e.to_string()))?
        .len();
    if count > max {
        return Err(Fatal::AclFile(format!(
            "{} holds {count} bindings, more than IGGY_KAFKA_MAX_ACL_BINDINGS={max}",
            path.display()
        )));
    }
    info!(file = %path.display(), bindings = count, "ACL file read");
    Ok((
        Arc::new(store.with_max(max)),
        format!(
            "memory, loaded from {} (CreateAcls changes are lost at exit)",
            path.display()
        ),
    ))
}

/// The one start-up line about authorization: on or off, where ACLs come from, and what
/// happens on a resource no binding names.
/// Iggy users looked at by [`warn_about_meta_writers`].
const META_WRITERS_LOOKED_AT: usize = 1_000;

/// Names, at start, every Iggy user other than the bridge's account that can append to
/// the meta stream: with a meta secret their records are ignored (and counted), without
/// one they can grant and route.
async fn warn_about_meta_writers(bridge: &IggyBridge, meta_stream: &str, proven: bool) {
    match bridge.meta_stream_writers(META_WRITERS_LOOKED_AT).await {
        Ok(writers) => {
            for user in &writers {
                if proven {
                    warn!(
                        iggy_user = %user,
                        meta_stream,
                        "this Iggy user can append to the meta stream; its records carry no \
                         gateway's proof and are ignored, but it should not hold that grant"
                    );
                } else {
                    warn!(
                        iggy_user = %user,
                        meta_stream,
                        "this Iggy user can append to the meta stream, and without \
                         iggy_meta_secret its records are trusted: it can write SCRAM \
                         credentials, ACL bindings and where clients connect"
                    );
                }
            }
        }
        Err(e) => warn!(
            error = %e,
            meta_stream,
            "cannot tell which Iggy users can write the meta stream"
        ),
    }
}

fn announce_authorization(on: bool, broker: &kafka_broker::BrokerConfig, source: &str, iggy: bool) {
    let settings = &broker.authorization;
    let how = match settings.enabled {
        None => "as some listener authenticates",
        Some(_) => "as configured",
    };
    if on {
        info!(
            acl_source = %source,
            allow_everyone_if_no_acl_found = settings.allow_everyone_if_no_acl_found,
            super_users = broker.sasl.super_users.len(),
            acl_refresh_ms = u64::try_from(settings.acl_refresh_interval.as_millis()).unwrap_or(u64::MAX),
            "authorization on ({how}): every request is checked; super users may do everything; \
             others may do what ACL bindings allow{}; a topic or group no binding names is {}; \
             managing ACLs, SCRAM credentials, quotas and broker configs and sending \
             transaction markers need an explicit grant",
            if iggy { " and their Iggy permissions allow" } else { "" },
            match (settings.allow_everyone_if_no_acl_found, iggy) {
                (true, true) => "open to every principal as far as its Iggy permissions allow",
                (true, false) => "open to every authenticated principal",
                (false, true) => "open only as far as the principal's Iggy permissions allow (topics); \
                                  groups and transactional ids need a binding",
                (false, false) => "refused",
            }
        );
        if broker.sasl.super_users.is_empty() && !iggy && !settings.allow_everyone_if_no_acl_found {
            warn!(
                "IGGY_KAFKA_SUPER_USERS is empty: only the bindings of IGGY_KAFKA_ACL_FILE grant \
                 anything, and no principal may create more through CreateAcls"
            );
        }
        if settings.allow_everyone_if_no_acl_found {
            warn!(
                "IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=true: a topic, group or transactional id \
                 that no ACL binding names is open to every authenticated principal"
            );
        }
    } else {
        info!(
            acl_source = %source,
            "authorization off ({}): every client may do everything",
            if settings.enabled.is_none() {
                "no listener authenticates its clients"
            } else {
                "IGGY_KAFKA_AUTHORIZATION_ENABLED=false"
            }
        );
    }
}

/// Where SASL credentials are checked and kept.
#[derive(Default)]
struct Credentials {
    plain: Option<Arc<dyn PlainAuthenticator>>,
    scram: Option<Arc<dyn ScramCredentialStore>>,
    /// The embedded store's users file, read again now and then.
    users_file: Option<Arc<UsersFile>>,
}

/// How often the users file is read again, so users added with the `users` command while
/// the gateway runs can log in without a restart.
const USERS_FILE_RELOAD: Duration = Duration::from_secs(5);

/// Looks at the users file every [`USERS_FILE_RELOAD`] for as long as the gateway runs
/// and reads it again when its modification time or size changed. A file that does not
/// load keeps the users in memory and is reported once per distinct reason.
async fn reload_users(users: Arc<UsersFile>) {
    let mut ticks = tokio::time::interval(USERS_FILE_RELOAD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let mut last_error: Option<String> = None;
    let stamp = |users: &UsersFile| {
        users
            .path()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut seen = stamp(&users);
    loop {
        ticks.tick().await;
        // Only a file that changed is read again (the gateway's own writes change it too,
        // and reading those back is harmless).
        let now = stamp(&users);
        if now == seen {
            continue;
        }
        seen = now;
        let file = users.clone();
        let result = tokio::task::spawn_blocking(move || file.reload()).await;
        match result {
            Ok(Ok(())) => last_error = None,
            Ok(Err(e)) => {
                let why = e.to_string();
                if last_error.as_deref() != Some(why.as_str()) {
                    warn!(error = %why, "SASL users file not reloaded; keeping the users read before");
                    last_error = Some(why);
                }
            }
            Err(_) => return,
        }
    }
}

/// Writes the listen lines (format in the crate docs). A closed stdout is not a reason to
/// stop serving, so write errors are ignored.
fn announce(bound: SocketAddr, advertised: &str, listeners: &[String]) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening on {bound} advertised {advertised}");
    for line in listeners {
        let _ = writeln!(stdout, "{line}");
    }
    let _ = stdout.flush();
}

/// Runs a `users` command: 0 when done, 1 when the file cannot be changed, 2 for bad
/// input.
fn users(command: UsersCommand) -> ExitCode {
    let result = match command {
        UsersCommand::SetPassword { file, user } => read_password()
            .and_then(|password| {
                UsersFile::load(&file)
                    .and_then(|users| users.set_password(&user, &password))
                    .map_err(|e| (1, e.to_string()))
            })
            .map(|()| format!("password of {user:?} set in {}", file.display())),
        UsersCommand::SetScram {
            file,
            mechanism,
            iterations,
            user,
        } => {
            let mechanism = match Mechanism::from_name(&mechanism.to_ascii_uppercase())
                .and_then(Mechanism::scram)
            {
                Some(m) => Ok(m),
                None => Err((
                    2,
                    format!("--mechanism {mechanism:?}: SCRAM-SHA-256 or SCRAM-SHA-512"),
                )),
            };
            mechanism
                .and_then(|m| read_password().map(|p| (m, p)))
                .and_then(|(m, password)| {
                    let credential = ScramCredential::from_password(m, &password, iterations)
                        .map_err(|e| (2, e.to_string()))?;
                    UsersFile::load(&file)
                        .and_then(|users| users.set_scram(&user, credential))
                        .map_err(|e| (1, e.to_string()))
                        .map(|()| {
                            format!(
                                "{} credential of {user:?} set in {}",
                                m.name(),
                                file.display()
                            )
                        })
                })
        }
        UsersCommand::Delete { file, user } => UsersFile::load(&file)
            .and_then(|users| users.remove_user(&user))
            .map_err(|e| (1, e.to_string()))
            .map(|removed| {
                if removed {
                    format!("{user:?} removed from {}", file.display())
                } else {
                    format!("{user:?} is not in {}", file.display())
                }
            }),
    };
    match result {
        Ok(done) => {
            eprintln!("iggy-gateway-kafka: {done}");
            ExitCode::SUCCESS
        }
        Err((code, why)) => {
            eprintln!("iggy-gateway-kafka: {why}");
            ExitCode::from(code)
        }
    }
}

/// One line from stdin, without its line ending; an empty password is refused.
fn read_password() -> Result<String, (u8, String)> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| (2, format!("cannot read the password from stdin: {e}")))?;
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if password.is_empty() {
        return Err((2, "no password on stdin (one line expected)".into()));
    }
    Ok(password.to_owned())
}

/// `host:port`, with an IPv6 literal in brackets so the port stays unambiguous.
fn host_port(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}
