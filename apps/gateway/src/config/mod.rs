//! The gateway's configuration: three layers merged with figment, then validated by section.
//!
//! Layers, later ones win:
//!
//! 1. built-in defaults (the owning library's own defaults, so there is one source of truth);
//! 2. an optional TOML file (`--config <FILE>` or `IGGY_KAFKA_CONFIG`), flat keys in lower case;
//! 3. `IGGY_KAFKA_*` environment variables, the same keys in upper case with the prefix.
//!
//! Environment values are handed to serde as raw strings and parsed per field with
//! [`FromStr`](std::str::FromStr). figment's stock `Env` provider guesses types from the text
//! instead, which turns a password of `123456` into a number, `[x]` into an array and `"x"`
//! into `x`; raw strings keep every value exactly as written. An empty variable counts as
//! unset, so templated deployments can pass `IGGY_KAFKA_ADVERTISED_HOST=` without effect.
//!
//! An unknown key in the file is an error: the file is written for this program, so a
//! misspelt key is a mistake worth stopping for. An unknown `IGGY_KAFKA_*` variable is only
//! a warning: environments carry variables nobody wrote for the gateway (Kubernetes
//! injects `IGGY_KAFKA_PORT`, `IGGY_KAFKA_SERVICE_HOST`, ... for a Service named
//! `iggy-kafka`), and refusing to start there would make the gateway undeployable.
//!
//! # Sections and who checks them
//!
//! The file stays flat; the keys fall into sections, one module each, and every rule lives
//! with the code that owns the value:
//!
//! | Section | Keys | Rules checked by |
//! |---|---|---|
//! | [`listener`] | `bind_addr`, `metrics_addr`, `advertised_*`, `node_id`, `cluster_id`, `instance_id` | the gateway (addresses it binds); [`BrokerConfig::check`] (what is announced) |
//! | [`limits`], [`timeouts`], [`topics`], [`groups`] | `max_*`, `*_timeout_secs`, `auto_create_*`, `default_*`, `group_*` | [`BrokerConfig::check`] |
//! | [`memory`] | `memory_*` | the gateway: the embedded store's config has no checks of its own |
//! | [`bridge`] | `bridge_enabled`, `iggy_*`, `topic_map_path` | [`BridgeConfig::validate`](iggy_kafka_bridge::BridgeConfig::validate) |
//! | [`logging`] | `log_format` | the gateway |
//! | [`runtime`] | `worker_threads` | the gateway |
//! | [`quotas`] | `quota_*` | [`BrokerConfig::check`] |
//! | [`transactions`] | `transaction_*` | [`BrokerConfig::check`] ([`TransactionSettings::check`](kafka_broker::TransactionSettings::check)) |
//! | [`security`] | `listeners`, `advertised_listeners`, `listener_security_protocol_map`, `sasl_*`, `tls_*`, `super_users`, `max_concurrent_authentications` | the gateway (listeners, files, bounds) |
//! | [`cluster`] | `brokers`, `cluster_session_timeout_ms`, `cluster_heartbeat_interval_ms` | the gateway (the list, this node in it, the backend, the timings) |
//! | [`inter_gateway`] | `inter_gateway_*` | the gateway (mechanism, credentials, CA file, bounds) |
//! | [`authorization`] | `authorization_enabled`, `allow_everyone_if_no_acl_found`, `acl_*`, `max_acl_bindings` | the gateway (ACL source); [`BrokerConfig::check`] (refresh interval) |
//!
//! Every error is one line naming the setting as the operator wrote it: the variable for
//! values from the environment, the key and file for values from a file. A library's
//! error says which of its fields is wrong; the section that fills the field knows the key.

mod authorization;
mod bridge;
mod cluster;
mod groups;
mod inter_gateway;
mod limits;
mod listener;
mod logging;
mod memory;
mod quotas;
mod runtime;
mod security;
#[cfg(test)]
mod tests;
mod timeouts;
mod topics;
mod transactions;
mod values;

pub use authorization::AclSetup;
pub use cluster::ClusterSettings;
pub use logging::LogFormat;
pub use security::{ListenerSpec, SaslSetup};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use iggy_kafka_bridge::BridgeConfig;
use kafka_broker::BrokerConfig;
use kafka_broker::config::InvalidSetting;
use kafka_broker::store::memory::MemoryStoreConfig;
use kafka_broker::tls::TlsSettings;
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Prefix of every environment variable the gateway reads.
pub const ENV_PREFIX: &str = "IGGY_KAFKA_";

/// The variable naming the TOML file; it selects a layer, it is not a setting itself.
pub const CONFIG_FILE_VAR: &str = "IGGY_KAFKA_CONFIG";

/// A configuration the gateway refuses to start with. The message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    fn new(message: impl Into<String>) -> Self {
        ConfigError(message.into())
    }
}

/// Which backend serves the data.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Everything in process memory, lost at exit.
    Memory(MemoryStoreConfig),
    /// Apache Iggy, through the bridge (`IGGY_KAFKA_BRIDGE_ENABLED=true`).
    Iggy(Box<BridgeConfig>),
}

/// A validated configuration, ready to start the gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Every listener; the first one's address is the broker's own.
    pub listeners: Vec<ListenerSpec>,
    /// The listeners come from `listeners` (Kafka's style) rather than `bind_addr`.
    pub kafka_style_listeners: bool,
    /// SASL mechanisms and credential sources, when a listener uses SASL.
    pub sasl: Option<SaslSetup>,
    /// The TLS acceptor's settings, when a listener uses TLS.
    pub tls: Option<TlsSettings>,
    /// Address of the HTTP endpoint for metrics and health checks; `None` serves none.
    pub metrics_addr: Option<SocketAddr>,
    /// The bearer token `/metrics` requires.
    pub metrics_token: Option<std::sync::Arc<kafka_broker::metrics::http::MetricsToken>>,
    /// Port announced to clients; `None` announces the port actually bound, which makes
    /// `IGGY_KAFKA_BIND_ADDR=127.0.0.1:0` usable.
    pub advertised_port: Option<u16>,
    /// Broker settings; its advertised port is replaced at start (see
    /// [`GatewayConfig::broker_config`]).
    pub broker: BrokerConfig,
    /// The data backend.
    pub backend: Backend,
    /// Where the ACL bindings come from and whether requests are checked.
    pub acls: AclSetup,
    /// The broker list and lease timings (several gateways).
    pub cluster: ClusterSettings,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Worker threads of the async runtime; `None` is one per core.
    pub worker_threads: Option<usize>,
    /// The file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// Settings that were given but have no effect, one message each, to be logged as
    /// warnings once logging is up.
    pub warnings: Vec<String>,
}

impl GatewayConfig {
    /// The broker configuration for a listener bound to `bound_port`.
    pub fn broker_config(&self, bound_port: u16) -> BrokerConfig {
        BrokerConfig {
            advertised_port: self.advertised_port.unwrap_or(bound_port),
            ..self.broker.clone()
        }
    }
}

/// Where a setting's value came from; used to name it in errors the way it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Default,
    File,
    Env,
}

/// Knows which layer supplied each key, and names keys accordingly.
struct Names<'a> {
    file: Option<&'a Path>,
    file_keys: BTreeSet<String>,
    env: Vec<(String, String)>,
}

impl Names<'_> {
    fn origin(&self, key: &str) -> Origin {
        if self.env.iter().any(|(k, _)| k == key) {
            Origin::Env
        } else if self.file_keys.contains(key) {
            Origin::File
        } else {
            Origin::Default
        }
    }

    /// The setting as the operator wrote it, for error messages.
    fn name(&self, key: &str) -> String {
        match (self.origin(key), self.file) {
            (Origin::Env, _) => {
                let value = self
                    .env
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or("", |(_, v)| v.as_str());
                format!("{}={value:?}", env_name(key))
            }
            (Origin::File, Some(path)) => format!("{key} in {}", path.display()),
            _ => format!("{} (default)", env_name(key)),
        }
    }

    /// The error for `key` breaking the rule `why`.
    fn invalid(&self, key: &str, why: &str) -> ConfigError {
        ConfigError::new(format!("{}: {why}", self.name(key)))
    }

    fn is_set(&self, key: &str) -> bool {
        self.origin(key) != Origin::Default
    }

    /// A setting named for a "has no effect" warning.
    fn ignored_name(&self, key: &str) -> String {
        match (self.origin(key), self.file) {
            (Origin::File, Some(path)) => format!("{key} in {}", path.display()),
            _ => env_name(key),
        }
    }
}

/// `max_connections` -> `IGGY_KAFKA_MAX_CONNECTIONS`.
pub fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// Every setting's key, section by section, read from the sections' serde derives so the
/// list cannot drift from the structs.
pub fn keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        [
            values::fields::<listener::Raw>(),
            values::fields::<limits::Raw>(),
            values::fields::<timeouts::Raw>(),
            values::fields::<topics::Raw>(),
            values::fields::<groups::Raw>(),
            values::fields::<memory::Raw>(),
            values::fields::<bridge::Raw>(),
            values::fields::<logging::Raw>(),
            values::fields::<runtime::Raw>(),
            values::fields::<quotas::Raw>(),
            values::fields::<security::Raw>(),
            values::fields::<authorization::Raw>(),
            values::fields::<cluster::Raw>(),
            values::fields::<transactions::Raw>(),
            values::fields::<inter_gateway::Raw>(),
        ]
        .concat()
    })
}

/// The environment layer: `IGGY_KAFKA_*` variables as raw strings.
struct EnvLayer<'a>(&'a [(String, String)]);

impl Provider for EnvLayer<'_> {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment variable")
            .interpolater(|_, path| path.iter().map(|k| env_name(k)).collect())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict: Dict = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        Ok(Profile::Default.collect(dict))
    }
}

/// Picks the gateway's variables out of the process environment: prefix stripped, key in
/// lower case, empty values dropped. [`CONFIG_FILE_VAR`] is not a setting and is skipped.
pub fn settings_from_env<I, K, V>(vars: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut settings: Vec<(String, String)> = vars
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.as_ref();
            let key = name.strip_prefix(ENV_PREFIX)?;
            if name == CONFIG_FILE_VAR || value.as_ref().trim().is_empty() {
                return None;
            }
            Some((key.to_ascii_lowercase(), value.as_ref().to_string()))
        })
        .collect();
    settings.sort();
    settings
}

/// Reads and validates the configuration from an optional TOML file and the gateway's
/// environment settings (see [`settings_from_env`]).
pub fn load(file: Option<&Path>, env: Vec<(String, String)>) -> Result<GatewayConfig, ConfigError> {
    let known = keys();
    let (env, unknown_env): (Vec<_>, Vec<_>) = env
        .into_iter()
        .partition(|(k, _)| known.contains(&k.as_str()));
    let mut warnings: Vec<String> = unknown_env
        .iter()
        .map(|(key, _)| {
            format!(
                "{} is not a setting of this gateway and is ignored (see docs/configuration.md)",
                env_name(key)
            )
        })
        .collect();

    let mut figment = Figment::new();
    let mut file_keys = BTreeSet::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let toml = Toml::string(&text);
        let data = toml.data().map_err(|e| {
            ConfigError::new(format!(
                "config file {} is not valid TOML: {}",
                path.display(),
                one_line(&e.kind.to_string())
            ))
        })?;
        for key in data.values().flat_map(|dict| dict.keys()) {
            if !known.contains(&key.as_str()) {
                let hint = if known.contains(&key.to_ascii_lowercase().as_str()) {
                    " (keys are lower case)"
                } else {
                    ""
                };
                return Err(ConfigError::new(format!(
                    "unknown key {key:?} in config file {}{hint}; the supported ones are listed in docs/configuration.md",
                    path.display()
                )));
            }
            file_keys.insert(key.clone());
        }
        figment = figment.merge(toml);
    }
    figment = figment.merge(EnvLayer(&env));

    let names = Names {
        file,
        file_keys,
        env,
    };
    let mut config = validate(&figment, &names)?;
    warnings.append(&mut config.warnings);
    config.warnings = warnings;
    Ok(config)
}

/// Reads one section out of the merged layers. Keys of other sections are skipped here;
/// unknown keys were dealt with before.
fn extract<T: DeserializeOwned>(figment: &Figment, names: &Names<'_>) -> Result<T, ConfigError> {
    figment.extract().map_err(|e| {
        let setting = e
            .path
            .first()
            .map_or_else(|| "configuration".to_string(), |key| names.name(key));
        ConfigError::new(format!("{setting}: {}", one_line(&e.kind.to_string())))
    })
}

/// Multi-line messages (TOML parse errors draw a caret diagram) folded to their first and
/// last lines, which carry the position and the reason.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [only] => (*only).to_string(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

/// Reads every section, fills the libraries' configs and has each owner check its part.
fn validate(figment: &Figment, names: &Names<'_>) -> Result<GatewayConfig, ConfigError> {
    let listener: listener::Raw = extract(figment, names)?;
    let limits: limits::Raw = extract(figment, names)?;
    let timeouts: timeouts::Raw = extract(figment, names)?;
    let topics: topics::Raw = extract(figment, names)?;
    let groups: groups::Raw = extract(figment, names)?;
    let memory: memory::Raw = extract(figment, names)?;
    let bridge: bridge::Raw = extract(figment, names)?;
    let logging: logging::Raw = extract(figment, names)?;
    let runtime: runtime::Raw = extract(figment, names)?;
    let quotas: quotas::Raw = extract(figment, names)?;
    let security: security::Raw = extract(figment, names)?;
    let authorization: authorization::Raw = extract(figment, names)?;
    let cluster: cluster::Raw = extract(figment, names)?;
    let inter_gateway: inter_gateway::Raw = extract(figment, names)?;
    let transactions: transactions::Raw = extract(figment, names)?;

    let mut broker = BrokerConfig::default();
    let listener = listener.validate(names, &mut broker)?;
    limits.apply(&mut broker.limits);
    timeouts.apply(&mut broker.timeouts);
    topics.apply(&mut broker);
    groups.apply(&mut broker.groups, &mut broker.group_state);
    quotas.apply(&mut broker.quotas);
    inter_gateway.validate(names, &mut broker.inter_gateway)?;
    transactions.apply(&mut broker.transactions);

    let memory = memory.validate(names)?;
    let mut bridge = bridge.validate(names)?;
    let cluster = cluster.validate(names, broker.node_id, bridge.config.is_some())?;
    // Producer ids carry the instance id and must be unique across gateways: among
    // several gateways, one without an instance id of its own takes its node id (unique
    // in the list).
    if cluster.has_others(broker.node_id) && !names.is_set("instance_id") {
        broker.instance_id = u16::try_from(broker.node_id).map_err(|_| {
            names.invalid(
                "instance_id",
                "must be set (0 to 65535) among several gateways when the node id is above 65535",
            )
        })?;
    }
    let log_format = logging.validate(names)?;
    let worker_threads = runtime.validate(names)?;
    let single = security::Single {
        bind: listener.bind_addr,
        advertised_host: broker.advertised_host.clone(),
        advertised_port: listener.advertised_port,
        advertised_host_set: names.is_set("advertised_host"),
    };
    let mut security = security.validate(names, single, bridge.config.is_some(), &mut broker)?;
    if let Some(sasl) = &security.sasl {
        // The peer client asks no more of this gateway than it accepts from its own
        // credentials.
        broker.inter_gateway.max_scram_iterations = sasl.config.scram.max_iterations;
    }
    let authenticates = authorization::authenticates(&security.listeners, security.tls.as_ref());
    let acls = authorization.validate(
        names,
        bridge.config.is_some(),
        authenticates,
        &mut broker.authorization,
        &mut security.warnings,
    )?;
    // Who may write the meta stream may grant and route: with clients told apart, only
    // records the gateways prove count (see iggy_kafka_bridge::proof).
    if authenticates
        && bridge
            .config
            .as_ref()
            .is_some_and(|b| b.meta_secret.is_none())
    {
        return Err(names.invalid(
            "iggy_meta_secret",
            "is required with the Iggy bridge when a listener authenticates its clients: \
             the meta stream holds SCRAM credentials, ACL bindings and where clients \
             connect, and any Iggy user allowed to send to it could write them; give every \
             gateway of the cluster the same secret of at least 32 bytes (see \
             docs/security.md)",
        ));
    }
    broker
        .check()
        .map_err(|e| broker_setting_error(&e, names))?;
    if let Some(metrics) = listener.metrics_addr
        && let Some(taken) = security
            .listeners
            .iter()
            .find(|l| listener::overlaps(metrics, l.bind))
    {
        return Err(names.invalid(
            "metrics_addr",
            &format!(
                "takes the port of listener {} ({}); give it a port of its own",
                taken.name, taken.bind
            ),
        ));
    }
    let first = security
        .listeners
        .first()
        .cloned()
        .ok_or_else(|| ConfigError::new("no listener configured"))?;
    let advertised: Vec<(&str, &str, Option<u16>)> = security
        .listeners
        .iter()
        .map(|l| {
            let port = l.advertise.port.or(Some(l.bind.port()).filter(|p| *p != 0));
            (l.name.as_str(), l.advertise.host.as_str(), port)
        })
        .collect();
    cluster
        .check_listed(broker.node_id, &advertised)
        .map_err(|why| names.invalid("brokers", &why))?;
    let mut warnings = std::mem::take(&mut bridge.warnings);
    warnings.append(&mut security.warnings);
    if listener.metrics_token.is_some() && listener.metrics_addr.is_none() {
        warnings.push(format!(
            "{} has no effect: the metrics endpoint is off (no metrics_addr)",
            names.ignored_name("metrics_bearer_token_file")
        ));
    }

    Ok(GatewayConfig {
        listeners: security.listeners,
        kafka_style_listeners: names.is_set("listeners"),
        sasl: security.sasl,
        tls: security.tls,
        metrics_addr: listener.metrics_addr,
        metrics_token: listener.metrics_token.clone(),
        advertised_port: first.advertise.port,
        broker,
        backend: match bridge.config {
            Some(mut b) => {
                // One set of log_cleaner_* settings, whichever store compacts.
                let c = &memory.cleaner;
                b.cleaner = iggy_kafka_bridge::CleanerConfig {
                    enable: c.enable,
                    backoff: c.backoff,
                    dedupe_buffer_size: c.dedupe_buffer_size,
                    io_max_bytes_per_second: c.io_max_bytes_per_second,
                };
                Backend::Iggy(Box::new(b))
            }
            None => Backend::Memory(memory),
        },
        acls,
        cluster,
        log_format,
        worker_threads,
        config_file: names.file.map(Path::to_path_buf),
        warnings,
    })
}

/// The broker's verdict on one of its fields, with the field named by the setting that
/// filled it.
fn broker_setting_error(e: &InvalidSetting, names: &Names<'_>) -> ConfigError {
    let key = [
        listener::BROKER_FIELDS,
        limits::BROKER_FIELDS,
        timeouts::BROKER_FIELDS,
        topics::BROKER_FIELDS,
        groups::BROKER_FIELDS,
        quotas::BROKER_FIELDS,
        authorization::BROKER_FIELDS,
        transactions::BROKER_FIELDS,
    ]
    .into_iter()
    .flatten()
    .find(|(field, _)| *field == e.field)
    .map(|(_, key)| *key);
    match key {
        Some(key) => names.invalid(key, &e.reason),
        // A field no setting fills keeps its default; the broker rejecting it is a bug
        // here, but still one line and still a refusal to start.
        None => ConfigError::new(format!("broker setting {e}")),
    }
}
