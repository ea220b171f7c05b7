//! Several gateways in front of one store: the broker list, and the lease timings the
//! bridge's membership uses.
//!
//! `brokers` is the same list on every gateway, `id@host:port` separated by commas (the
//! advertised address of each gateway's first listener; IPv6 hosts in brackets). It must
//! name this gateway's `node_id`, each node id and address once. Empty (the default), or
//! naming only this gateway, is a gateway alone: today's behaviour. Leases live in Iggy,
//! so a list naming other gateways needs the bridge; with the embedded store it is an
//! error.
//!
//! A gateway renews its lease every heartbeat interval and is considered gone by the
//! others once its last renewal is older than the session timeout; the interval must be
//! under a third of the timeout, so two renewals can be lost without losing the lease.

use super::values::{parsed, parsed_opt};
use super::{ConfigError, Names};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// Default `cluster_session_timeout_ms`.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 10_000;
/// Default `cluster_heartbeat_interval_ms`.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 1_000;

/// The cluster settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed_opt")]
    brokers: Option<String>,
    #[serde(deserialize_with = "parsed")]
    cluster_session_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    cluster_heartbeat_interval_ms: u64,
}

impl Default for Raw {
    fn default() -> Self {
        Raw {
            brokers: None,
            cluster_session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
            cluster_heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
        }
    }
}

/// One gateway of the broker list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// Its node id (`IGGY_KAFKA_NODE_ID` there).
    pub node_id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: u16,
}

/// The validated cluster settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Every gateway of the list, in the order given; empty for a gateway alone.
    pub brokers: Vec<BrokerAddress>,
    /// How long a gateway's lease lasts without renewal.
    pub session_timeout: Duration,
    /// How often a gateway renews its lease.
    pub heartbeat_interval: Duration,
}

impl ClusterSettings {
    /// Whether the list names a gateway other than `node_id` (several gateways).
    pub fn has_others(&self, node_id: i32) -> bool {
        self.brokers.iter().any(|b| b.node_id != node_id)
    }

    /// Checks that the list's entry for `node_id` is one of this gateway's advertised
    /// listeners. `listeners` are `(name, host, port)`; a port of `None` is chosen when
    /// the listener binds (port 0 and no advertised port), which no list entry can name.
    /// Hosts compare without regard to case. An empty list checks nothing.
    pub(super) fn check_listed(
        &self,
        node_id: i32,
        listeners: &[(&str, &str, Option<u16>)],
    ) -> Result<(), String> {
        let Some(me) = self.brokers.iter().find(|b| b.node_id == node_id) else {
            return Ok(());
        };
        let named = |host: &str, port: Option<u16>| {
            port == Some(me.port) && host.eq_ignore_ascii_case(&me.host)
        };
        if listeners.iter().any(|(_, h, p)| named(h, *p)) {
            return Ok(());
        }
        let listed = host_port(&me.host, me.port);
        let advertised: Vec<String> = listeners
            .iter()
            .map(|(name, h, p)| match p {
                Some(p) => format!("{name} {}", host_port(h, *p)),
                None => format!("{name} {h}:<port chosen at start>"),
            })
            .collect();
        let hint = if listeners.iter().any(|(_, _, p)| p.is_none()) {
            "; a listener in the list needs a fixed port (a bind port other than 0, or an advertised port)"
        } else {
            ""
        };
        Err(format!(
            "names this gateway (node id {node_id}) at {listed}, which is none of its advertised listeners ({}){hint}",
            advertised.join(", ")
        ))
    }
}

/// `host:port`, an IPv6 host in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Parses one `id@host:port` entry.
fn entry(text: &str) -> Result<BrokerAddress, String> {
    let (id, address) = text
        .split_once('@')
        .ok_or_else(|| format!("{text:?} is not id@host:port"))?;
    let node_id: i32 = id
        .trim()
        .parse()
        .ok()
        .filter(|n: &i32| *n >= 0)
        .ok_or_else(|| format!("{text:?}: the node id must be a number, 0 or more"))?;
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?}: the address must be host:port"))?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{text:?}: unclosed '[' in the host"))?,
        None if host.contains(':') => {
            return Err(format!(
                "{text:?}: put an IPv6 host in brackets, [::1]:9092"
            ));
        }
        None => host,
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{text:?}: the host is empty or has spaces"));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{text:?}: the port must be 1 to 65535"))?;
    Ok(BrokerAddress {
        node_id,
        host: host.to_string(),
        port,
    })
}

/// Parses the whole list: entries separated by commas, each node id and address once.
fn parse(list: &str) -> Result<Vec<BrokerAddress>, String> {
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    let mut addresses = BTreeSet::new();
    for text in list.split(',').map(str::trim) {
        if text.is_empty() {
            return Err("an empty entry (two commas in a row, or a comma at an end)".into());
        }
        let b = entry(text)?;
        if !ids.insert(b.node_id) {
            return Err(format!("node id {} is listed twice", b.node_id));
        }
        if !addresses.insert((b.host.clone(), b.port)) {
            return Err(format!("{}:{} is listed twice", b.host, b.port));
        }
        out.push(b);
    }
    Ok(out)
}

impl Raw {
    /// Checks the list against this gateway's `node_id` and the backend (`bridge`: whether
    /// the bridge serves the data), and the lease timings.
    pub(super) fn validate(
        self,
        names: &Names<'_>,
        node_id: i32,
        bridge: bool,
    ) -> Result<ClusterSettings, ConfigError> {
        let brokers = match self.brokers.as_deref().map(str::trim) {
            None | Some("") => Vec::new(),
            Some(list) => parse(list).map_err(|why| names.invalid("brokers", &why))?,
        };
        if !brokers.is_empty() && !brokers.iter().any(|b| b.node_id == node_id) {
            return Err(names.invalid(
                "brokers",
                &format!("does not name this gateway's node id {node_id} (IGGY_KAFKA_NODE_ID)"),
            ));
        }
        let settings = ClusterSettings {
            brokers,
            session_timeout: Duration::from_millis(self.cluster_session_timeout_ms),
            heartbeat_interval: Duration::from_millis(self.cluster_heartbeat_interval_ms),
        };
        if settings.has_others(node_id) && !bridge {
            return Err(names.invalid(
                "brokers",
                "names other gateways, which needs the Iggy bridge (IGGY_KAFKA_BRIDGE_ENABLED=true): the embedded store is one process's memory",
            ));
        }
        if self.cluster_session_timeout_ms == 0 {
            return Err(names.invalid("cluster_session_timeout_ms", "must be at least 1"));
        }
        if self.cluster_heartbeat_interval_ms == 0
            || self.cluster_heartbeat_interval_ms.saturating_mul(3)
                >= self.cluster_session_timeout_ms
        {
            return Err(names.invalid(
                "cluster_heartbeat_interval_ms",
                &format!(
                    "must be at least 1 and under a third of the session timeout ({} ms)",
                    self.cluster_session_timeout_ms
                ),
            ));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use super::super::tests::{env, load_err};
    use super::*;

    #[test]
    fn entries_parse_with_ipv6_and_spaces() {
        let list = parse(" 1@gw1:9092, 2@[::1]:9093 ,3@10.0.0.3:19092").unwrap();
        assert_eq!(
            list,
            vec![
                BrokerAddress {
                    node_id: 1,
                    host: "gw1".into(),
                    port: 9092
                },
                BrokerAddress {
                    node_id: 2,
                    host: "::1".into(),
                    port: 9093
                },
                BrokerAddress {
                    node_id: 3,
                    host: "10.0.0.3".into(),
                    port: 19092
                },
            ]
        );
    }

    #[test]
    fn bad_entries_are_refused() {
        for (bad, why) in [
            ("gw1:9092", "not id@host:port"),
            ("x@gw1:9092", "node id must be a number"),
            ("-1@gw1:9092", "node id must be a number"),
            ("1@gw1", "must be host:port"),
            ("1@:9092", "host is empty"),
            ("1@gw1:0", "port must be 1 to 65535"),
            ("1@gw1:70000", "port must be 1 to 65535"),
            ("1@::1:9092", "IPv6 host in brackets"),
            ("1@[::1:9092", "unclosed"),
            ("1@gw1:9092,,2@gw2:9092", "empty entry"),
            ("1@gw1:9092,1@gw2:9092", "node id 1 is listed twice"),
            ("1@gw1:9092,2@gw1:9092", "gw1:9092 is listed twice"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    const BRIDGE: &[(&str, &str)] = &[
        ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
        ("IGGY_KAFKA_IGGY_PASSWORD", "secret"),
    ];

    fn with_bridge<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        BRIDGE.iter().chain(pairs).copied().collect()
    }

    #[test]
    fn defaults_are_a_gateway_alone() {
        let config = load(None, Vec::new()).unwrap();
        assert!(config.cluster.brokers.is_empty());
        assert!(!config.cluster.has_others(config.broker.node_id));
        assert_eq!(config.cluster.session_timeout, Duration::from_secs(10));
        assert_eq!(config.cluster.heartbeat_interval, Duration::from_secs(1));
    }

    #[test]
    fn the_list_reaches_the_settings_with_the_bridge() {
        let pairs = with_bridge(&[
            ("IGGY_KAFKA_NODE_ID", "2"),
            ("IGGY_KAFKA_ADVERTISED_HOST", "gw2"),
            ("IGGY_KAFKA_ADVERTISED_PORT", "9092"),
            ("IGGY_KAFKA_BROKERS", "1@gw1:9092,2@gw2:9092,3@gw3:9092"),
            ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", "6000"),
            ("IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS", "500"),
        ]);
        let config = load(None, env(&pairs)).unwrap();
        let ids: Vec<i32> = config.cluster.brokers.iter().map(|b| b.node_id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert!(config.cluster.has_others(2));
        assert_eq!(config.cluster.session_timeout, Duration::from_millis(6000));
        assert_eq!(
            config.cluster.heartbeat_interval,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn list_mistakes_name_the_setting() {
        // This gateway missing from the list.
        let err = load_err(
            None,
            &with_bridge(&[
                ("IGGY_KAFKA_NODE_ID", "4"),
                ("IGGY_KAFKA_BROKERS", "1@gw1:9092,2@gw2:9092"),
            ]),
        );
        assert!(err.starts_with("IGGY_KAFKA_BROKERS="), "{err}");
        assert!(err.contains("node id 4"), "{err}");
        // Duplicates and syntax.
        let err = load_err(
            None,
            &with_bridge(&[("IGGY_KAFKA_BROKERS", "1@gw1:9092,1@gw2:9092")]),
        );
        assert!(err.contains("listed twice"), "{err}");
        let err = load_err(None, &with_bridge(&[("IGGY_KAFKA_BROKERS", "gw1:9092")]));
        assert!(err.contains("not id@host:port"), "{err}");
        // The embedded store with other gateways.
        let err = load_err(None, &[("IGGY_KAFKA_BROKERS", "1@gw1:9092,2@gw2:9092")]);
        assert!(err.contains("needs the Iggy bridge"), "{err}");
        // The embedded store naming only itself is a gateway alone.
        let config = load(None, env(&[("IGGY_KAFKA_BROKERS", "1@127.0.0.1:9093")])).unwrap();
        assert!(!config.cluster.has_others(1));
        // Timings.
        let err = load_err(
            None,
            &[
                ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", "3000"),
                ("IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS", "1000"),
            ],
        );
        assert!(
            err.starts_with("IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS="),
            "{err}"
        );
        let err = load_err(None, &[("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", "0")]);
        assert!(err.contains("at least 1"), "{err}");
    }

    #[test]
    fn the_entry_of_this_gateway_is_one_of_its_advertised_listeners() {
        // The single listener: the bind address, or the advertised host and port.
        let alone = |pairs: &[(&'static str, &'static str)]| {
            let mut all = vec![("IGGY_KAFKA_NODE_ID", "1")];
            all.extend_from_slice(pairs);
            all
        };
        for ok in [
            alone(&[
                ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:19092"),
                ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19092"),
            ]),
            alone(&[
                ("IGGY_KAFKA_BIND_ADDR", "0.0.0.0:19092"),
                ("IGGY_KAFKA_ADVERTISED_HOST", "GW1.example"),
                ("IGGY_KAFKA_ADVERTISED_PORT", "29092"),
                ("IGGY_KAFKA_BROKERS", "1@gw1.example:29092"),
            ]),
            alone(&[
                ("IGGY_KAFKA_BIND_ADDR", "[::1]:19092"),
                ("IGGY_KAFKA_BROKERS", "1@[::1]:19092"),
            ]),
        ] {
            load(None, env(&ok)).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for (bad, says) in [
            // Another port, another host.
            (
                alone(&[
                    ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:19092"),
                    ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19093"),
                ]),
                "none of its advertised listeners (PLAINTEXT 127.0.0.1:19092)",
            ),
            (
                alone(&[
                    ("IGGY_KAFKA_BIND_ADDR", "0.0.0.0:19092"),
                    ("IGGY_KAFKA_ADVERTISED_HOST", "gw1.example"),
                    ("IGGY_KAFKA_BROKERS", "1@0.0.0.0:19092"),
                ]),
                "(PLAINTEXT gw1.example:19092)",
            ),
            // The bind address when another port is advertised.
            (
                alone(&[
                    ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:19092"),
                    ("IGGY_KAFKA_ADVERTISED_PORT", "29092"),
                    ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19092"),
                ]),
                "(PLAINTEXT 127.0.0.1:29092)",
            ),
            // A port chosen at start cannot be listed.
            (
                alone(&[
                    ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0"),
                    ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19092"),
                ]),
                "needs a fixed port",
            ),
        ] {
            let err = load_err(None, &bad);
            assert!(err.starts_with("IGGY_KAFKA_BROKERS="), "{err}");
            assert!(err.contains("names this gateway (node id 1) at"), "{err}");
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        // Several gateways: the same check, after the list's own.
        let err = load_err(
            None,
            &with_bridge(&[
                ("IGGY_KAFKA_NODE_ID", "2"),
                ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:19092"),
                ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19092,2@127.0.0.2:19092"),
            ]),
        );
        assert!(err.contains("at 127.0.0.2:19092, which is none"), "{err}");
    }

    #[test]
    fn with_several_listeners_the_entry_may_name_any_of_them() {
        let listeners = [
            (
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://127.0.0.1:19092,SASL_PLAINTEXT://127.0.0.1:19093",
            ),
            ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
            ("IGGY_KAFKA_SASL_USERS_FILE", "/nonexistent/users.json"),
        ];
        for listed in ["1@127.0.0.1:19092", "1@127.0.0.1:19093"] {
            let mut pairs = listeners.to_vec();
            pairs.push(("IGGY_KAFKA_BROKERS", listed));
            load(None, env(&pairs)).unwrap_or_else(|e| panic!("{listed}: {e}"));
        }
        // Advertised addresses count, bound ones do not when they differ.
        let mut pairs = listeners.to_vec();
        pairs.extend([
            (
                "IGGY_KAFKA_ADVERTISED_LISTENERS",
                "PLAINTEXT://gw1:9092,SASL_PLAINTEXT://gw1:9093",
            ),
            ("IGGY_KAFKA_BROKERS", "1@127.0.0.1:19093"),
        ]);
        let err = load_err(None, &pairs);
        assert!(
            err.contains("(PLAINTEXT gw1:9092, SASL_PLAINTEXT gw1:9093)"),
            "{err}"
        );
        pairs.pop();
        pairs.push(("IGGY_KAFKA_BROKERS", "1@gw1:9093"));
        load(None, env(&pairs)).unwrap();
    }
}
