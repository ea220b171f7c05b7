//! Where the gateway listens and who it says it is: the Kafka listener, the metrics
//! endpoint, the host and port clients are told, the node, cluster and instance ids.
//!
//! The gateway checks what only it knows: the addresses it binds, and that a listener on
//! every interface needs an advertised host. What is announced belongs to the broker, whose
//! [`BrokerConfig::check`] rules on it.

use super::values::{parsed, parsed_opt};
use super::{ConfigError, Names};
use kafka_broker::BrokerConfig;
use kafka_broker::metrics::http::MetricsToken;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Shortest bearer token taken for the metrics endpoint (bytes).
pub const MIN_METRICS_TOKEN_BYTES: usize = 16;

/// The listener settings as read from the layers.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    bind_addr: String,
    #[serde(deserialize_with = "parsed_opt")]
    metrics_addr: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    metrics_bearer_token_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    advertised_host: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    advertised_port: Option<u16>,
    #[serde(deserialize_with = "parsed")]
    node_id: i32,
    #[serde(deserialize_with = "parsed")]
    cluster_id: String,
    #[serde(deserialize_with = "parsed")]
    instance_id: u16,
}

impl Default for Raw {
    fn default() -> Self {
        let broker = BrokerConfig::default();
        Raw {
            bind_addr: "127.0.0.1:9093".into(),
            metrics_addr: None,
            metrics_bearer_token_file: None,
            advertised_host: None,
            advertised_port: None,
            node_id: broker.node_id,
            cluster_id: broker.cluster_id,
            instance_id: broker.instance_id,
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("advertised_host", "advertised_host"),
    ("advertised_port", "advertised_port"),
    ("node_id", "node_id"),
    ("cluster_id", "cluster_id"),
    ("instance_id", "instance_id"),
];

/// The addresses the gateway binds.
#[derive(Debug, Clone)]
pub(super) struct Listener {
    pub bind_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    /// The bearer token `/metrics` requires (read from `metrics_bearer_token_file`).
    pub metrics_token: Option<Arc<MetricsToken>>,
    /// `None` announces the port actually bound.
    pub advertised_port: Option<u16>,
}

impl Raw {
    /// Checks the addresses and fills the broker's identity and advertised address.
    pub(super) fn validate(
        self,
        names: &Names<'_>,
        broker: &mut BrokerConfig,
    ) -> Result<Listener, ConfigError> {
        let bind_addr = socket_addr(&self.bind_addr).ok_or_else(|| {
            names.invalid(
                "bind_addr",
                "expected IP:PORT, e.g. 127.0.0.1:9093 or [::1]:9093",
            )
        })?;
        let metrics_addr = match &self.metrics_addr {
            None => None,
            Some(text) => Some(socket_addr(text).ok_or_else(|| {
                names.invalid(
                    "metrics_addr",
                    "expected IP:PORT, e.g. 127.0.0.1:9100 or [::1]:9100",
                )
            })?),
        };
        // With `listeners` set, the metrics address is checked against those instead.
        if let Some(metrics) = metrics_addr
            && !names.is_set("listeners")
            && overlaps(metrics, bind_addr)
        {
            return Err(names.invalid(
                "metrics_addr",
                &format!(
                    "takes the Kafka listener's port ({bind_addr}); give it a port of its own"
                ),
            ));
        }

        let advertised_host = match self.advertised_host {
            Some(host) => host,
            None if bind_addr.ip().is_unspecified() => {
                return Err(ConfigError::new(format!(
                    "{}: binding every interface ({}) needs IGGY_KAFKA_ADVERTISED_HOST set to the host clients should connect to",
                    names.name("bind_addr"),
                    bind_addr.ip()
                )));
            }
            None => bind_addr.ip().to_string(),
        };

        broker.node_id = self.node_id;
        broker.cluster_id = self.cluster_id;
        broker.instance_id = self.instance_id;
        broker.advertised_host = advertised_host;
        // Placeholder until the listener is bound; see `GatewayConfig::broker_config`.
        broker.advertised_port = self.advertised_port.unwrap_or(match bind_addr.port() {
            0 => 9093,
            port => port,
        });
        let metrics_token = match &self.metrics_bearer_token_file {
            None => None,
            Some(path) => Some(Arc::new(MetricsToken::new(
                &read_token(path)
                    .map_err(|why| names.invalid("metrics_bearer_token_file", &why))?,
            ))),
        };
        Ok(Listener {
            bind_addr,
            metrics_addr,
            metrics_token,
            advertised_port: self.advertised_port,
        })
    }
}

/// The token in `path` (surrounding whitespace dropped): at least
/// [`MIN_METRICS_TOKEN_BYTES`], printable ASCII, in a file only its owner may read.
fn read_token(path: &std::path::Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "{} may be read by others (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let token = text.trim();
    if token.len() < MIN_METRICS_TOKEN_BYTES {
        return Err(format!(
            "the token in {} is shorter than {MIN_METRICS_TOKEN_BYTES} bytes",
            path.display()
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the token in {} must be printable ASCII without spaces",
            path.display()
        ));
    }
    Ok(token.to_owned())
}

/// `IP:PORT`; host names are not resolved here.
fn socket_addr(text: &str) -> Option<SocketAddr> {
    text.trim().parse().ok()
}

/// Whether binding both addresses would collide: the same fixed port on the same IP, or
/// on any IP when either side binds every interface.
pub(super) fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use super::super::tests::{env, load_err};

    #[test]
    fn metrics_are_off_unless_an_address_is_given() {
        let config = load(None, env(&[])).unwrap();
        assert_eq!(config.metrics_addr, None);

        for addr in ["127.0.0.1:9100", "[::1]:0", "0.0.0.0:9100"] {
            let config = load(None, env(&[("IGGY_KAFKA_METRICS_ADDR", addr)])).unwrap();
            assert_eq!(config.metrics_addr, Some(addr.parse().unwrap()));
        }
        // A wildcard metrics address needs no advertised host: nothing is announced.
        let config = load(None, env(&[("IGGY_KAFKA_METRICS_ADDR", " 0.0.0.0:9100 ")])).unwrap();
        assert_eq!(config.metrics_addr, Some("0.0.0.0:9100".parse().unwrap()));
    }

    #[test]
    fn metrics_address_is_checked_like_the_bind_address() {
        for bad in ["localhost:9100", "9100", "127.0.0.1", "127.0.0.1:65536"] {
            let message = load_err(None, &[("IGGY_KAFKA_METRICS_ADDR", bad)]);
            assert!(
                message.starts_with(&format!(
                    "IGGY_KAFKA_METRICS_ADDR={bad:?}: expected IP:PORT"
                )),
                "{message}"
            );
        }
        // Both listeners on one port cannot be bound.
        for (bind, metrics) in [
            ("127.0.0.1:9093", "127.0.0.1:9093"),
            ("0.0.0.0:9093", "127.0.0.1:9093"),
            ("127.0.0.1:9093", "[::]:9093"),
        ] {
            let message = load_err(
                None,
                &[
                    ("IGGY_KAFKA_BIND_ADDR", bind),
                    ("IGGY_KAFKA_ADVERTISED_HOST", "gw.example"),
                    ("IGGY_KAFKA_METRICS_ADDR", metrics),
                ],
            );
            assert!(message.starts_with("IGGY_KAFKA_METRICS_ADDR="), "{message}");
            assert!(message.contains("port of its own"), "{message}");
        }
        // Port 0 picks a free port for each, and other IPs are separate sockets.
        for (bind, metrics) in [
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("127.0.0.1:9093", "127.0.0.2:9093"),
        ] {
            let config = load(
                None,
                env(&[
                    ("IGGY_KAFKA_BIND_ADDR", bind),
                    ("IGGY_KAFKA_METRICS_ADDR", metrics),
                ]),
            )
            .unwrap();
            assert_eq!(config.metrics_addr, Some(metrics.parse().unwrap()));
        }
    }

    #[test]
    fn the_metrics_token_file_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("metrics-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let path = file.to_string_lossy().into_owned();
        let with = |text: &str, mode: u32| {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let var = "IGGY_KAFKA_METRICS_BEARER_TOKEN_FILE";
        let metrics = ("IGGY_KAFKA_METRICS_ADDR", "127.0.0.1:0");

        with("a-long-enough-token-0123\n", 0o600);
        let config = load(None, env(&[metrics, (var, &path)])).unwrap();
        assert!(config.metrics_token.is_some());
        assert!(!format!("{config:?}").contains("a-long-enough-token"));

        with("a-long-enough-token-0123\n", 0o644);
        let message = load_err(None, &[metrics, (var, &path)]);
        assert!(
            message.starts_with(var) && message.contains("chmod 600"),
            "{message}"
        );

        with("short\n", 0o600);
        let message = load_err(None, &[metrics, (var, &path)]);
        assert!(message.contains("shorter than 16 bytes"), "{message}");

        with("has a space in it 0123456789", 0o600);
        let message = load_err(None, &[metrics, (var, &path)]);
        assert!(message.contains("printable ASCII"), "{message}");

        let message = load_err(None, &[metrics, (var, "/nonexistent/token")]);
        assert!(message.contains("cannot read"), "{message}");

        // Without the endpoint it only warns.
        with("a-long-enough-token-0123", 0o600);
        let config = load(None, env(&[(var, &path)])).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.starts_with(&format!("{var} has no effect"))),
            "{:?}",
            config.warnings
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
