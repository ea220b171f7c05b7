//! Where the gateway listens and who it says it is: the Kafka listener, the metrics
//! endpoint, the host and port clients are told, the node, cluster and instance ids.
//!
//! The gateway checks what only it knows: the addresses it binds, and that a listener on
//! every interface needs an advertised host. What is announced belongs to the broker, whose
//! [`BrokerConfig::check`] rules on it.

use super::values::{parsed, parsed_opt};
use super::{ConfigError, Names};
use kafka_broker::BrokerConfig;
use serde::Deserialize;
use std::net::SocketAddr;

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
#[derive(Debug, Clone, Copy)]
pub(super) struct Listener {
    pub bind_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
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
        Ok(Listener {
            bind_addr,
            metrics_addr,
            advertised_port: self.advertised_port,
        })
    }
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
}
